package server

import (
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/cluster/node"
	"github.com/space-sandbox/space/internal/cluster/placement"
)

// TestDrainFlags: the drain's flags of spaced control and spaced worker,
// their defaults, what reaches placement, and bad values refused.
func TestDrainFlags(t *testing.T) {
	t.Setenv(StoreEnv, "")
	base := []string{"--store", "postgres://u@db/space", "--worker-token-file", "/s/token", "--admin-key-file", "/s/admin"}
	cfg, err := ParseControlFlags(base)
	if err != nil {
		t.Fatal(err)
	}
	pc := cfg.Drain.withDrain(placement.Config{})
	if cfg.Drain.Policy != DrainPolicyWake || pc.DrainStaysSuspended || pc.DrainGraceSeconds != k8s.DefaultDrainGraceSeconds || pc.DrainTimeout != 15*time.Minute {
		t.Fatalf("defaults: %+v -> %+v", cfg.Drain, pc)
	}
	cfg, err = ParseControlFlags(append(base, "--drain-policy", "suspend", "--drain-grace-seconds", "90", "--drain-timeout", "3m"))
	if err != nil {
		t.Fatal(err)
	}
	if pc := cfg.Drain.withDrain(placement.Config{}); !pc.DrainStaysSuspended || pc.DrainGraceSeconds != 90 || pc.DrainTimeout != 3*time.Minute {
		t.Fatalf("set: %+v", pc)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(base, "--drain-policy", "delete"), "--drain-policy"},
		{append(base, "--drain-grace-seconds", "-1"), "--drain-grace-seconds"},
		{append(base, "--drain-timeout", "-1s"), "--drain-timeout"},
	} {
		if _, err := ParseControlFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args[len(base):], err, tc.want)
		}
	}

	wbase := []string{"--kubeconfig", "/k", "--node-name", "space-a", "--listen", "10.0.0.1:7070"}
	w, err := ParseWorkerFlags(wbase)
	if err != nil {
		t.Fatal(err)
	}
	if w.Node.DrainConcurrency != node.DefaultDrainConcurrency || w.Node.ObjectStore {
		t.Fatalf("worker defaults: %+v", w.Node)
	}
	w, err = ParseWorkerFlags(append(wbase, "--drain-concurrency", "5", "--object-store", "s3://space-bucket/p?endpoint=127.0.0.1:9000"))
	if err != nil {
		t.Fatal(err)
	}
	if w.Node.DrainConcurrency != 5 || !w.Node.ObjectStore {
		t.Fatalf("worker set: %+v", w.Node)
	}
	if _, err := ParseWorkerFlags(append(wbase, "--drain-concurrency", "0")); err == nil || !strings.Contains(err.Error(), "--drain-concurrency") {
		t.Errorf("--drain-concurrency 0: %v", err)
	}
}
