package devcluster

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// WorkerName is the node name of worker i (0-based).
func WorkerName(i int) string { return "space-worker-" + strconv.Itoa(i+1) }

// startWorker starts worker i on a free port with its own data dir,
// registered as node WorkerName(i).
func (c *Cluster) startWorker(ctx context.Context, i int) error {
	if c.workerFlags == nil {
		if c.workerFlags = flagsOf(c.opts.Spaced, "worker"); c.workerFlags == nil {
			return fmt.Errorf("%s has no `spaced worker`", c.opts.Spaced)
		}
	}
	name := WorkerName(i)
	addr, err := freeAddr("127.0.0.1:0")
	if err != nil {
		return err
	}
	// A short data dir: a VM's sockets live under it (108-byte limit).
	p := &process{name: name, addr: addr, dataDir: filepath.Join(c.opts.Dir, "w", strconv.Itoa(i+1)),
		logPath: filepath.Join(c.opts.Dir, "logs", name+".log")}
	args, lacks := withFlags([]string{"worker"}, c.workerFlags,
		"listen", addr, "data-dir", p.dataDir, "token-file", c.Info.WorkerTokenFile,
		"kubeconfig", c.Info.Kubeconfig, "node-name", name, "namespace", c.opts.Namespace,
		"vcpus", strconv.Itoa(c.opts.WorkerVCPUs), "memory-mib", strconv.Itoa(c.opts.WorkerMemoryMiB),
		"sandboxes", strconv.Itoa(c.opts.WorkerSandboxes), "node-lease", c.opts.NodeLease.String())
	if len(lacks) > 0 {
		// Without them it would run on the host's defaults (its data dir).
		return fmt.Errorf("%s worker has no %s (or its -h no longer lists them)", c.opts.Spaced, strings.Join(lacks, ", "))
	}
	var missing []string
	if c.opts.SimulatedWorkers {
		args = append(args, "--simulate")
	} else {
		// Object storage arrives with the suspend/wake and artifacts work:
		// passed once the worker has the flags.
		args, missing = withFlags(args, c.workerFlags,
			"object-store", c.Info.S3, "object-store-credentials-file", c.Info.S3CredentialsFile)
	}
	if len(c.opts.ControlAddrs) > 0 {
		// Every replica, tried in turn: the egress proxy's secrets still
		// resolve while one of them is down.
		urls := make([]string, len(c.opts.ControlAddrs))
		for i, a := range c.opts.ControlAddrs {
			urls[i] = "http://" + a
		}
		args, _ = withFlags(args, c.workerFlags, "control", strings.Join(urls, ","))
	}
	p.args = append(args, c.opts.WorkerArgs...)
	if i == 0 && len(missing) > 0 {
		c.progress("workers run without %s (this spaced worker has no such flag)", strings.Join(missing, ", "))
	}
	c.progress("starting worker %s on %s (data %s)", name, addr, p.dataDir)
	if err := p.start(c.opts.Spaced); err != nil {
		return err
	}
	if i < len(c.workers) {
		c.workers[i] = p
	} else {
		c.workers = append(c.workers, p)
	}
	return nil
}

// startControl starts control replica i on its address and waits for its
// /readyz. A spaced without `spaced control` is noted, not an error: the
// rest of the cluster still runs.
func (c *Cluster) startControl(ctx context.Context, i int) error {
	if c.controlFlags == nil {
		c.controlFlags = flagsOf(c.opts.Spaced, "control")
		if c.controlFlags == nil {
			c.Info.Note = "no control replicas: " + errNoControl.Error() + " yet; the workers and servers run"
			c.progress("%s", c.Info.Note)
			c.controlFlags = map[string]bool{}
		}
	}
	if len(c.controlFlags) == 0 {
		return nil
	}
	addr, err := freeAddr(c.opts.ControlAddrs[i])
	if err != nil {
		return err
	}
	name := "control-" + strconv.Itoa(i+1)
	p := &process{name: name, addr: addr, dataDir: filepath.Join(c.opts.Dir, "controls", name),
		logPath: filepath.Join(c.opts.Dir, "logs", name+".log")}
	args, missing := withFlags([]string{"control"}, c.controlFlags,
		"listen", addr, "data-dir", p.dataDir,
		"kubeconfig", c.Info.Kubeconfig, "namespace", c.opts.Namespace,
		"worker-token-file", c.Info.WorkerTokenFile, "admin-key-file", c.Info.AdminKeyFile,
		"leader-lease", c.opts.Namespace+"/space-control", "secrets-key-file", c.Info.SecretsKeyFile,
		"object-store", c.Info.S3, "object-store-credentials-file", c.Info.S3CredentialsFile)
	p.args = append(args, c.opts.ControlArgs...)
	// The DSN holds the database password: in the environment
	// (spaced's $SPACE_STORE), not on a command line every user's ps shows.
	p.env = []string{"SPACE_STORE=" + c.Info.Postgres}
	if i == 0 && len(missing) > 0 {
		c.progress("controls run without %s (this spaced control has no such flag)", strings.Join(missing, ", "))
	}
	c.progress("starting control %s on http://%s", name, addr)
	if err := p.start(c.opts.Spaced); err != nil {
		return err
	}
	if i < len(c.controls) {
		c.controls[i] = p
	} else {
		c.controls = append(c.controls, p)
	}
	// One at a time: the first creates the admin key the others read.
	return waitHTTP(ctx, p, "http://"+addr+"/readyz")
}

// waitWorkersReady waits until every worker's node reads Ready.
func (c *Cluster) waitWorkersReady(ctx context.Context) error {
	for _, p := range c.workers {
		if err := waitNodeReady(ctx, c.kube.Client, p); err != nil {
			return err
		}
		c.progress("worker %s is a Ready node", p.name)
	}
	return nil
}

func waitNodeReady(ctx context.Context, client kubernetes.Interface, p *process) error {
	var last string
	for {
		n, err := client.CoreV1().Nodes().Get(ctx, p.name, metav1.GetOptions{})
		if err == nil {
			last = "not Ready"
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-p.done:
			return fmt.Errorf("worker %s exited at start-up; log %s:\n%s", p.name, p.logPath, logTail(p.logPath, 3000))
		case <-ctx.Done():
			return fmt.Errorf("worker %s: node %s; log %s:\n%s", p.name, last, p.logPath, logTail(p.logPath, 3000))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Kube is the cluster's Kubernetes control plane.
func (c *Cluster) Kube() kubernetes.Interface { return c.kube.Client }

// ControlURLs are the control replicas' base URLs, in order.
func (c *Cluster) ControlURLs() []string {
	var out []string
	for _, p := range c.controls {
		out = append(out, "http://"+p.addr)
	}
	return out
}

// KillControl SIGKILLs control replica i (as a crash would).
func (c *Cluster) KillControl(i int) { c.controls[i].kill() }

// RestartControl starts control replica i again (after KillControl) on
// its address and waits for it to be ready.
func (c *Cluster) RestartControl(ctx context.Context, i int) error {
	c.controls[i].kill()
	p := c.controls[i]
	if err := p.start(c.opts.Spaced); err != nil {
		return err
	}
	if err := waitHTTP(ctx, p, "http://"+p.addr+"/readyz"); err != nil {
		return err
	}
	return c.writeInfo()
}

// KillWorker SIGKILLs worker i (as a crash would): its VMs keep running,
// its node's Lease is no longer renewed.
func (c *Cluster) KillWorker(i int) { c.workers[i].kill() }

// RestartWorker starts worker i again with the same data dir, node name
// and address, and waits until it serves the worker protocol and its node
// is Ready. The listener comes first: the node's Ready condition may still
// be the killed process's (its Lease has not expired yet), and the worker
// listens only once it has adopted its sandboxes.
func (c *Cluster) RestartWorker(ctx context.Context, i int) error {
	p := c.workers[i]
	p.kill()
	if err := p.start(c.opts.Spaced); err != nil {
		return err
	}
	if err := waitListening(ctx, p); err != nil {
		return err
	}
	if err := waitNodeReady(ctx, c.kube.Client, p); err != nil {
		return err
	}
	return c.writeInfo()
}

// waitListening waits until p accepts TCP connections on its address.
func waitListening(ctx context.Context, p *process) error {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", p.addr)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited at start-up; log %s:\n%s", p.name, p.logPath, logTail(p.logPath, 3000))
		case <-ctx.Done():
			return fmt.Errorf("%s does not listen on %s: %v; log %s:\n%s", p.name, p.addr, err, p.logPath, logTail(p.logPath, 3000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WorkerPID is worker i's process id (0 when it is not running).
func (c *Cluster) WorkerPID(i int) int {
	if c.workers[i].exited() {
		return 0
	}
	return c.workers[i].pid()
}

// LogTails is the end of every spaced's log, for a failed test.
func (c *Cluster) LogTails(n int64) string {
	var b strings.Builder
	for _, p := range append(append([]*process{}, c.controls...), c.workers...) {
		fmt.Fprintf(&b, "--- %s (%s):\n%s\n", p.name, p.logPath, logTail(p.logPath, n))
	}
	return b.String()
}
