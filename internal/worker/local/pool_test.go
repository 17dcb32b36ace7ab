package local_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker/local"
)

// awaitPool waits until cond holds for the worker's pool stats.
func awaitPool(t *testing.T, w *local.Worker, what string, cond func(local.PoolStats) bool) local.PoolStats {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := w.PoolStats()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool never got %s: %+v", what, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPool(t *testing.T) {
	e := newEnv(t)
	poolRoot := filepath.Join(e.cfg.Storage.Root(), "pool")
	t.Cleanup(func() { testenv.CheckNoLeaks(t, poolRoot) })
	ctx := context.Background()
	e.cfg.PoolSize = 1
	w := e.open()
	t.Cleanup(func() { cleanupAll(t, w) })

	if err := w.PrepareTemplate(ctx, spec("sbx_tpl")); err != nil {
		t.Fatal(err)
	}
	awaitPool(t, w, "an entry", func(s local.PoolStats) bool { return s.Ready == 1 })

	// take: the create uses the pooled VM, which gets the sandbox's identity.
	if _, err := w.CreateSandbox(ctx, spec("sbx_p1")); err != nil {
		t.Fatal(err)
	}
	if st := w.PoolStats(); st.Taken != 1 {
		t.Fatalf("create did not take the pooled VM: %+v", st)
	}
	c1 := agent(t, w, "sbx_p1")
	if code := sh(t, c1, `test "$(hostname)" = sbx-p1 && echo hi > /root/p1`); code != 0 {
		t.Fatalf("pooled sandbox has the wrong identity or disk: exit %d", code)
	}

	// refill: a new entry comes, and a second take is isolated from the first.
	awaitPool(t, w, "a refill", func(s local.PoolStats) bool { return s.Ready == 1 && s.Made == 2 })
	if _, err := w.CreateSandbox(ctx, spec("sbx_p2")); err != nil {
		t.Fatal(err)
	}
	c2 := agent(t, w, "sbx_p2")
	if code := sh(t, c2, `test "$(hostname)" = sbx-p2 && ! test -e /root/p1`); code != 0 {
		t.Fatalf("second pooled sandbox not isolated: exit %d", code)
	}
	r1, err := readFile(t, c1, "/proc/sys/kernel/random/uuid")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := readFile(t, c2, "/proc/sys/kernel/random/uuid")
	if err != nil {
		t.Fatal(err)
	}
	if string(r1) == string(r2) {
		t.Fatalf("two pooled clones share random state: %s", r1)
	}

	// The sandboxes live on (suspend/wake works on a taken VM) and are
	// adopted by a new worker; pooled VMs are not sandboxes.
	if _, err := w.SuspendSandbox(ctx, "sbx_p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WakeSandbox(ctx, "sbx_p1"); err != nil {
		t.Fatal(err)
	}
	if code := sh(t, agent(t, w, "sbx_p1"), `test -e /root/p1`); code != 0 {
		t.Fatalf("pooled sandbox lost its file across suspend/wake: exit %d", code)
	}
	awaitPool(t, w, "a refill", func(s local.PoolStats) bool { return s.Ready == 1 })

	// After a crash, a second worker on the same data reaps the pooled VM
	// the first left running and adopts only the sandboxes.
	if len(testenv.Leaks(poolRoot)) < 2 { // sbx_p2 (paths of its start) and the entry
		t.Fatalf("pooled VMMs: %v", testenv.Leaks(poolRoot))
	}
	w.Crash()
	e.cfg.PoolSize = -1
	w2 := e.open()
	sbs, err := w2.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != 2 {
		t.Fatalf("adopted %d sandboxes, want 2: %+v", len(sbs), sbs)
	}
	if entries, _ := os.ReadDir(poolRoot); len(entries) != 0 {
		t.Fatalf("pool dir not reaped: %d entries", len(entries))
	}
	cleanupAll(t, w2)
	if entries, _ := os.ReadDir(poolRoot); len(entries) != 0 {
		t.Fatalf("pool dir not empty after close: %d entries", len(entries))
	}
}

func TestPoolDrainOnClose(t *testing.T) {
	e := newEnv(t)
	poolRoot := filepath.Join(e.cfg.Storage.Root(), "pool")
	t.Cleanup(func() { testenv.CheckNoLeaks(t, poolRoot) })
	e.cfg.PoolSize = 2
	w := e.open()
	if err := w.PrepareTemplate(context.Background(), spec("sbx_tpl")); err != nil {
		t.Fatal(err)
	}
	awaitPool(t, w, "two entries", func(s local.PoolStats) bool { return s.Ready == 2 })
	if len(testenv.Leaks(poolRoot)) == 0 {
		t.Fatal("no pooled VMM runs under the pool dir")
	}
	w.Close()
	if n := len(testenv.Leaks(poolRoot)); n != 0 {
		t.Fatalf("%d pooled VMMs left after Close", n)
	}
	if entries, _ := os.ReadDir(poolRoot); len(entries) != 0 {
		t.Fatalf("pool dir not empty after close: %d entries", len(entries))
	}
}
