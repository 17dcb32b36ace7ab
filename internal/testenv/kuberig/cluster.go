// Package kuberig runs a real Kubernetes control plane on this machine:
// Debian's etcd, and kube-apiserver, kube-scheduler and
// kube-controller-manager from the multi-call binary test/kube builds
// (scripts/kube-build.sh). Cluster-mode tests use it through Start or Shared;
// `make cluster` uses the same start logic through Run.
//
// Everything listens on 127.0.0.1 on ports chosen free at start, and every
// link is authenticated: a CA made at start signs etcd's and each
// component's serving certificate and every client certificate (etcd takes
// client certificates only; the API server authenticates the admin, the
// scheduler and the controller manager by certificate and ServiceAccounts by
// the tokens it signs). Authorization is Node,RBAC; admission plugins are the
// defaults. The controller manager runs every default controller, with node
// lifecycle timings short enough for tests (a node whose Lease stops being
// renewed reads NotReady within about NodeMonitorGracePeriod).
//
// The package owns only the processes and files it starts and writes; it
// must not touch anything of SPACE's own (no server, worker or store code).
package kuberig

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options tune a control plane. The zero value works: it finds the binary
// through $SPACE_KUBE_BIN or scripts/kube-build.sh and uses test timings.
type Options struct {
	// KubeBinary is the multi-call binary test/kube builds. Empty: the
	// $SPACE_KUBE_BIN environment variable, else what
	// scripts/kube-build.sh prints (it builds once, then only prints).
	KubeBinary string
	// EtcdBinary is etcd's server. Empty: /usr/bin/etcd (Debian's etcd-server).
	EtcdBinary string
	// NodeMonitorGracePeriod is how long a node may go without a heartbeat
	// (Lease renewal or status update) before it reads NotReady (Ready
	// condition Unknown) and gets the unreachable taint. Zero: 8s.
	NodeMonitorGracePeriod time.Duration
	// StartTimeout bounds the whole start. Zero: 3 minutes.
	StartTimeout time.Duration
	// LeaderElect makes the scheduler and controller manager elect leaders
	// on Leases, as they would with several replicas. Off by default: one
	// replica each, and start-up is faster without it.
	LeaderElect bool
	// Verbosity is the components' klog -v level (0 by default).
	Verbosity int
}

func (o Options) withDefaults() Options {
	if o.EtcdBinary == "" {
		o.EtcdBinary = "/usr/bin/etcd"
	}
	if o.NodeMonitorGracePeriod == 0 {
		o.NodeMonitorGracePeriod = 8 * time.Second
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 3 * time.Minute
	}
	return o
}

// Cluster is a running control plane. Its methods are safe for concurrent
// use; Stop is safe to call twice.
type Cluster struct {
	// Dir holds the rig's certificates, kubeconfigs, etcd's data and each
	// component's log (<component>.log).
	Dir string
	// Kubeconfig is the admin's kubeconfig (group system:masters), usable
	// with kubectl --kubeconfig.
	Kubeconfig string
	// URL is the API server's address, https://127.0.0.1:<port>.
	URL string
	// Config is the admin's client configuration.
	Config *rest.Config
	// Client is a client-go clientset on Config.
	Client kubernetes.Interface

	ca       *authority
	procs    []*process // in start order: etcd, apiserver, scheduler, controller-manager
	stopOnce sync.Once
	mu       sync.Mutex
	stopped  bool
}

// Component is one process of the control plane, for `make cluster`'s
// record and for tests that kill one on purpose.
type Component struct {
	Name string
	PID  int
	Log  string
}

// Components lists the running processes in start order.
func (c *Cluster) Components() []Component {
	var out []Component
	for _, p := range c.procs {
		out = append(out, Component{Name: p.name, PID: p.pid(), Log: p.logPath})
	}
	return out
}

// Run starts a control plane with its files in dir (created if absent) and
// returns once the API server, scheduler and controller manager report
// healthy. On error everything it started is stopped again. The caller
// stops the cluster with Stop; the processes also die with the caller.
func Run(ctx context.Context, dir string, opts Options) (*Cluster, error) {
	opts = opts.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	kubeBin, err := kubeBinary(ctx, opts.KubeBinary)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(opts.EtcdBinary); err != nil {
		return nil, fmt.Errorf("kuberig: etcd server %s: %w (install Debian's etcd-server: make setup)", opts.EtcdBinary, err)
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("kuberig: %w", err)
	}
	c := &Cluster{Dir: dir}
	if err := c.start(ctx, kubeBin, opts); err != nil {
		c.Stop()
		return nil, fmt.Errorf("kuberig: %w", err)
	}
	return c, nil
}

// Stop ends every component, newest first (SIGTERM, then SIGKILL after a
// grace period), by the PIDs it started. It leaves Dir in place; the caller
// removes it.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		c.stopped = true
		c.mu.Unlock()
		for i := len(c.procs) - 1; i >= 0; i-- {
			c.procs[i].stop()
		}
	})
}

// Check reports the first component that has exited, if any: a rig whose
// controller manager died would otherwise fail tests in puzzling ways.
func (c *Cluster) Check() error {
	for _, p := range c.procs {
		if p.exited() {
			return p.failure()
		}
	}
	return nil
}
