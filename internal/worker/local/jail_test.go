package local_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/jail/jailtest"
	"github.com/space-sandbox/space/internal/vmm/qemu"
	"github.com/space-sandbox/space/internal/worker/local"
)

// checkJailed fails t unless the VMM recorded in stateDir runs jailed and
// sees none of the worker's data dir (no other sandbox, no pool entry, no
// template, not even its own sandbox dir by its host path).
func checkJailed(t *testing.T, root, stateDir string) {
	t.Helper()
	pid, j, spec, err := qemu.RecordedJail(stateDir)
	if err != nil {
		t.Fatalf("vmm record in %s: %v", stateDir, err)
	}
	if j == nil {
		t.Fatalf("vmm %d in %s has no jail", pid, stateDir)
	}
	hidden := []string{root, filepath.Join(root, "templates"), filepath.Join(root, "snapshots")}
	for _, pat := range []string{"sandboxes/*", "pool/*", "checkpoints/*"} {
		m, _ := filepath.Glob(filepath.Join(root, pat))
		hidden = append(hidden, m...)
	}
	jailtest.Check(t, pid, *j, qemu.Limits(spec), true, hidden...)
}

func sandboxVM(root, id string) string { return filepath.Join(root, "sandboxes", id, "vm") }

// TestJailedVMMs checks the VMM of a pooled VM, of a sandbox that took it
// (files and state dir renamed under it), of a sandbox restored on wake,
// and of one adopted by a new worker after a crash.
func TestJailedVMMs(t *testing.T) {
	e := newEnv(t)
	root := e.cfg.Storage.Root()
	ctx := context.Background()
	e.cfg.PoolSize = 1
	w := e.open()
	t.Cleanup(func() { cleanupAll(t, w) })
	if err := w.PrepareTemplate(ctx, spec("sbx_tpl")); err != nil {
		t.Fatal(err)
	}
	awaitPool(t, w, "an entry", func(s local.PoolStats) bool { return s.Ready == 1 })
	pooled, _ := filepath.Glob(filepath.Join(root, "pool", "*", "vm"))
	if len(pooled) != 1 {
		t.Fatalf("pooled VMs: %v", pooled)
	}
	checkJailed(t, root, pooled[0])

	if _, err := w.CreateSandbox(ctx, spec("sbx_j1")); err != nil {
		t.Fatal(err)
	}
	if st := w.PoolStats(); st.Taken != 1 {
		t.Fatalf("create did not take the pooled VM: %+v", st)
	}
	if code := sh(t, agent(t, w, "sbx_j1"), `echo hi > /root/j1`); code != 0 {
		t.Fatalf("pooled sandbox: exit %d", code)
	}
	checkJailed(t, root, sandboxVM(root, "sbx_j1"))

	if _, err := w.SuspendSandbox(ctx, "sbx_j1"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WakeSandbox(ctx, "sbx_j1"); err != nil {
		t.Fatal(err)
	}
	if code := sh(t, agent(t, w, "sbx_j1"), `test -e /root/j1`); code != 0 {
		t.Fatalf("woken sandbox lost its file: exit %d", code)
	}
	checkJailed(t, root, sandboxVM(root, "sbx_j1"))

	w.Crash()
	e.cfg.PoolSize = -1
	w = e.open()
	if code := sh(t, agent(t, w, "sbx_j1"), `test -e /root/j1`); code != 0 {
		t.Fatalf("adopted sandbox lost its file: exit %d", code)
	}
	checkJailed(t, root, sandboxVM(root, "sbx_j1"))
}

// TestHostileGuestWithinLimit runs a fork bomb and a memory hog in a
// sandbox: the guest's own limits end them, and the VMM's memory stays
// within its cgroup's limit without the limit ever killing it.
func TestHostileGuestWithinLimit(t *testing.T) {
	e := newEnv(t)
	root := e.cfg.Storage.Root()
	ctx := context.Background()
	e.cfg.PoolSize = -1
	w := e.open()
	t.Cleanup(func() { cleanupAll(t, w) })
	if _, err := w.CreateSandbox(ctx, spec("sbx_h")); err != nil {
		t.Fatal(err)
	}
	c := agent(t, w, "sbx_h")
	for _, a := range []struct{ name, shell string }{
		{"fork bomb", "f(){ f|f& };f; sleep 600"},
		{"memory hog", `awk 'BEGIN{s="xxxxxxxx"; while(1) s=s s}'; sleep 600`},
	} {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		id := fmt.Sprintf("h%d", cmdSeq.Add(1))
		if _, err := c.Start(cctx, agentproto.ProcessSpec{ID: id, Shell: a.shell, TimeoutSeconds: 10}); err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		for {
			info, err := c.Get(cctx, id)
			if err != nil {
				t.Fatalf("%s: %v", a.name, err)
			}
			if info.Exit != nil {
				t.Logf("%s ended %s", a.name, info.Exit.Reason)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		cancel()
	}
	if code := sh(t, c, "true"); code != 0 {
		t.Fatalf("sandbox after the attacks: exit %d", code)
	}
	pid, j, sp, err := qemu.RecordedJail(sandboxVM(root, "sbx_h"))
	if err != nil || j == nil {
		t.Fatalf("jail of sbx_h: %v", err)
	}
	limit := qemu.Limits(sp).MemoryBytes
	peak := j.PeakMemory()
	t.Logf("vmm %d peak memory %d MiB, limit %d MiB", pid, peak>>20, limit>>20)
	if peak <= 0 || peak > limit {
		t.Errorf("vmm peak memory %d, limit %d", peak, limit)
	}
	if j.OOMKilled() {
		t.Error("the memory limit killed a process of the VMM's jail")
	}
	checkJailed(t, root, sandboxVM(root, "sbx_h"))
}
