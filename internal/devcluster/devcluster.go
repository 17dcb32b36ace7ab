// Package devcluster runs SPACE's cluster mode on one machine: a real
// Kubernetes control plane (internal/testenv/kuberig: Debian's etcd and
// kube-apiserver, kube-scheduler and kube-controller-manager from test/kube),
// a private PostgreSQL (pgtest), SeaweedFS as the S3 object store (s3test),
// N `spaced control` replicas and M `spaced worker`s, each worker a
// Kubernetes node with its own data dir. It is the one launcher behind
// `make cluster` / `make cluster-down` (cmd/space-cluster) and the e2e
// cluster suite (e2e/cluster), so both run exactly the same processes.
//
// Every process is started with a death signal (it dies with the launcher),
// recorded by PID in cluster.json, and stopped by that PID. What a worker
// leaves on the host when it dies (VMMs, network namespaces, jail ids,
// its data volume's loop mount) is found from its data dir and removed by
// Stop and by Down.
//
// It is a development and test tool: it links the test rigs, and no
// production binary imports it.
package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/testenv/kuberig"
	"github.com/space-sandbox/space/internal/testenv/pgtest"
	"github.com/space-sandbox/space/internal/testenv/s3test"
)

// InfoFile is the name of the record Start writes in Options.Dir.
const InfoFile = "cluster.json"

// DefaultDir is where `make cluster` keeps its state.
const DefaultDir = "/var/lib/space-cluster"

// Options say what to start. Spaced and Dir are required.
type Options struct {
	// Dir holds cluster.json, the logs, the kube rig's files and every
	// worker's and control's data dir.
	Dir string
	// Spaced is the spaced binary (space-agent must sit beside it, or be
	// given in WorkerArgs as --agent-binary).
	Spaced string
	// ModuleRoot is SPACE's source tree (for scripts/kube-build.sh and
	// test/s3's version); empty: found from the working directory up.
	ModuleRoot string
	// ControlAddrs are the control replicas' listen addresses, one replica
	// each (default 127.0.0.1:8080 and 127.0.0.1:8081; "127.0.0.1:0" picks
	// a free port).
	ControlAddrs []string
	// Workers is how many workers run (default 3); each offers
	// WorkerVCPUs, WorkerMemoryMiB and WorkerSandboxes (default 2, 2048
	// and 8), its vCPUs overcommitted as spaced worker's
	// --vcpu-overcommit says (default 4: 8 one-vCPU sandboxes a worker).
	Workers                                       int
	WorkerVCPUs, WorkerMemoryMiB, WorkerSandboxes int
	// NodeLease is the workers' node Lease duration (default 20s) and
	// NodeMonitorGracePeriod the controller manager's (default 40s): a
	// node silent that long reads NotReady and its Pods are evicted after
	// their tolerationSeconds. Tests shorten both.
	NodeLease, NodeMonitorGracePeriod time.Duration
	// Namespace of the sandbox Pods (k8s.DefaultNamespace when "").
	Namespace string
	// SimulatedWorkers runs the workers as `spaced worker --simulate`
	// (docs/simulate.md): no VMs, so many sandboxes fit, for measuring the
	// control plane. They get no --object-store, which a simulated worker
	// refuses rather than accept a store it would never write (a drain
	// then cannot move their sandboxes); the replicas keep theirs.
	SimulatedWorkers bool
	// ControlArgs and WorkerArgs are added to every control's and worker's
	// command line (e.g. --accel tcg, --schedule-timeout 20s).
	ControlArgs, WorkerArgs []string
	// StartTimeout bounds the whole start (default 10 minutes: a worker's
	// first start builds the base template).
	StartTimeout time.Duration
	// Progress, when set, gets one line per step.
	Progress io.Writer
}

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" || o.Spaced == "" {
		return o, errors.New("devcluster: Dir and Spaced are required")
	}
	var err error
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return o, err
	}
	if o.Spaced, err = filepath.Abs(o.Spaced); err != nil {
		return o, err
	}
	if o.ModuleRoot == "" {
		if o.ModuleRoot, err = findModuleRoot(); err != nil {
			return o, err
		}
	}
	if o.ControlAddrs == nil {
		o.ControlAddrs = []string{"127.0.0.1:8080", "127.0.0.1:8081"}
	}
	if o.Workers == 0 {
		o.Workers = 3
	}
	if o.WorkerVCPUs == 0 {
		o.WorkerVCPUs = 2
	}
	if o.WorkerMemoryMiB == 0 {
		o.WorkerMemoryMiB = 2048
	}
	if o.WorkerSandboxes == 0 {
		o.WorkerSandboxes = 8
	}
	if o.NodeLease == 0 {
		o.NodeLease = 20 * time.Second
	}
	if o.NodeMonitorGracePeriod == 0 {
		o.NodeMonitorGracePeriod = 40 * time.Second
	}
	if o.Namespace == "" {
		o.Namespace = k8s.DefaultNamespace
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 10 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o, nil
}

// findModuleRoot walks up from the working directory to SPACE's go.mod.
func findModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && len(b) > 0 &&
			fileHasModule(b, "module github.com/space-sandbox/space\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("devcluster: SPACE's go.mod not found from the working directory up; set ModuleRoot")
		}
		dir = parent
	}
}

func fileHasModule(gomod []byte, line string) bool {
	return len(gomod) >= len(line) && string(gomod[:len(line)]) == line
}

// Cluster is a running cluster. Its methods are not safe for concurrent
// use; Stop is safe to call twice.
type Cluster struct {
	Info Info

	opts     Options
	kube     *kuberig.Cluster
	pg       *pgtest.Server
	s3       *s3test.Server
	controls []*process
	workers  []*process
	stopped  bool

	workerFlags, controlFlags map[string]bool // what this spaced accepts
}

// Start brings the whole cluster up in order, each part ready before the
// next that needs it, waits until a create of the base template would
// succeed (ready.go), writes cluster.json and returns. On error it stops
// and removes what it started.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	opts, err = opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	if _, err := os.Stat(filepath.Join(opts.Dir, InfoFile)); err == nil {
		return nil, fmt.Errorf("devcluster: %s exists: a cluster runs there (stop it with make cluster-down)", filepath.Join(opts.Dir, InfoFile))
	}
	c = &Cluster{opts: opts, Info: Info{Dir: opts.Dir, Namespace: opts.Namespace, Supervisor: os.Getpid()}}
	defer func() {
		if err != nil {
			c.Stop()
			err = fmt.Errorf("devcluster: %w", err)
		}
	}()
	if err := c.startServers(ctx); err != nil {
		return c, err
	}
	// The replicas' ports are chosen before the workers start: a worker's
	// --control names them all.
	c.opts.ControlAddrs = slices.Clone(opts.ControlAddrs)
	for i, a := range c.opts.ControlAddrs {
		if c.opts.ControlAddrs[i], err = freeAddr(a); err != nil {
			return c, err
		}
	}
	for i := range opts.Workers {
		if err := c.startWorker(ctx, i); err != nil {
			return c, err
		}
	}
	for i := range opts.ControlAddrs {
		if err := c.startControl(ctx, i); err != nil {
			return c, err
		}
	}
	if err := c.waitWorkersReady(ctx); err != nil {
		return c, err
	}
	if err := c.waitCreatable(ctx); err != nil { // ready.go
		return c, err
	}
	c.Info.Ready = true
	return c, c.writeInfo()
}

func (c *Cluster) progress(format string, args ...any) {
	fmt.Fprintf(c.opts.Progress, "space-cluster: "+format+"\n", args...)
}
