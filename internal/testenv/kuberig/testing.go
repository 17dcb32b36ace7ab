package kuberig

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
)

// Start runs a control plane for one test (or benchmark) and stops it, by
// PID, when the test ends, and removes its directory; when the test failed
// it first logs the end of each component's log. A missing binary or a
// start failure fails the test: nothing is skipped.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "kuberig-")
	if err != nil {
		t.Fatalf("kuberig: %v", err)
	}
	c, err := Run(context.Background(), dir, opts)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stopAndRemove(t.Failed(), t.Logf) })
	return c
}

// shared is the one control plane of a test binary that uses Shared.
var shared struct {
	once    sync.Once
	cluster *Cluster
	err     error
}

// Shared returns the test binary's one control plane, started on first use
// with opts (later calls' opts are ignored), so every test of a package
// shares one start-up (a few seconds). Tests sharing it must keep apart by
// names (their own namespace, nodes and labels). The package's TestMain must
// stop it:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		kuberig.StopShared(code != 0)
//		os.Exit(code)
//	}
func Shared(t testing.TB, opts Options) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "kuberig-")
		if err != nil {
			shared.err = err
			return
		}
		shared.cluster, shared.err = Run(context.Background(), dir, opts)
		if shared.err != nil {
			_ = os.RemoveAll(dir)
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	if err := shared.cluster.Check(); err != nil {
		t.Fatalf("kuberig: shared control plane broken: %v", err)
	}
	return shared.cluster
}

// StopShared stops the control plane Shared started, if any, and removes its
// directory; after a failed run (failed true) it first prints the end of
// each component's log to stderr.
func StopShared(failed bool) {
	if shared.cluster == nil {
		return
	}
	shared.cluster.stopAndRemove(failed, func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	})
}

// stopAndRemove stops the cluster and removes its directory, after logging
// the end of each component's log when failed is set.
func (c *Cluster) stopAndRemove(failed bool, logf func(string, ...any)) {
	c.Stop()
	if failed {
		for _, p := range c.procs {
			logf("kuberig: last lines of %s's log:\n%s", p.name, tail(p.logPath, 30))
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		logf("kuberig: remove %s: %v", c.Dir, err)
	}
}
