package local_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local"
)

// awaitWakes waits until cond holds for the worker's wake slot stats.
func awaitWakes(t *testing.T, w *local.Worker, what string, cond func(local.PoolStats) bool) local.PoolStats {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := w.WakePoolStats()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("wake slots never got %s: %+v", what, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWakeSlots: a suspend starts a VMM of its shape ahead; the wake takes
// it, with the snapshot's memory (a running process, a tmpfs file) and disk
// reflinked onto the files that VMM already holds; the disk stays the
// sandbox's across a second suspend; a damaged snapshot is data_loss on a
// slot too, with no VM left running.
func TestWakeSlots(t *testing.T) {
	e := newEnv(t)
	slotRoot := filepath.Join(e.cfg.Storage.Root(), "wakepool")
	t.Cleanup(func() { testenv.CheckNoLeaks(t, slotRoot) })
	ctx := context.Background()
	e.cfg.PoolSize = -1 // creates restore on the request path: only wake slots run ahead
	w := e.open()
	t.Cleanup(func() { cleanupAll(t, w) })

	if _, err := w.CreateSandbox(ctx, spec("sbx_ws")); err != nil {
		t.Fatal(err)
	}
	c := agent(t, w, "sbx_ws")
	startCounter(t, c)
	inMem := writeRandom(t, c, "/tmp/in-memory", 1<<20)
	onDisk := writeRandom(t, c, "/root/on-disk", 1<<20)
	if st := w.WakePoolStats(); st.Made != 0 {
		t.Fatalf("a VMM was started ahead before any suspend: %+v", st)
	}

	if _, err := w.SuspendSandbox(ctx, "sbx_ws"); err != nil {
		t.Fatal(err)
	}
	awaitWakes(t, w, "a slot", func(s local.PoolStats) bool { return s.Ready == 1 })
	// Jailed like every VMM, and it sees none of the data dir.
	slots, _ := filepath.Glob(filepath.Join(slotRoot, "*", "vm"))
	if len(slots) != 1 {
		t.Fatalf("pre-started VMMs: %v", slots)
	}
	checkJailed(t, e.cfg.Storage.Root(), slots[0])
	st, err := w.WakeSandbox(ctx, "sbx_ws")
	if err != nil {
		t.Fatal(err)
	}
	if ws := w.WakePoolStats(); ws.Taken != 1 {
		t.Fatalf("the wake did not take the slot: %+v", ws)
	}
	if st.State != worker.VMRunning {
		t.Fatalf("woken sandbox is %s", st.State)
	}
	checkJailed(t, e.cfg.Storage.Root(), sandboxVM(e.cfg.Storage.Root(), "sbx_ws"))
	before := count(t, c)
	waitCount(t, c, before)
	checkFile(t, c, "/tmp/in-memory", inMem)
	checkFile(t, c, "/root/on-disk", onDisk)
	later := writeRandom(t, c, "/root/later", 1<<20)

	// The slot's files are the sandbox's now: a second suspend snapshots
	// them, and the next wake (on the refilled slot) has what was written.
	awaitWakes(t, w, "a refill", func(s local.PoolStats) bool { return s.Ready == 1 && s.Made == 2 })
	if _, err := w.SuspendSandbox(ctx, "sbx_ws"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WakeSandbox(ctx, "sbx_ws"); err != nil {
		t.Fatal(err)
	}
	if ws := w.WakePoolStats(); ws.Taken != 2 {
		t.Fatalf("the second wake did not take a slot: %+v", ws)
	}
	checkFile(t, c, "/root/later", later)
	checkFile(t, c, "/tmp/in-memory", inMem)
	waitCount(t, c, count(t, c))

	// Damaged: verified while the slot loads the state; no vCPU runs.
	awaitWakes(t, w, "a refill", func(s local.PoolStats) bool { return s.Ready == 1 })
	if _, err := w.SuspendSandbox(ctx, "sbx_ws"); err != nil {
		t.Fatal(err)
	}
	corrupt(t, filepath.Join(e.cfg.Storage.Root(), "sandboxes", "sbx_ws", "suspend", "memory"))
	awaitWakes(t, w, "a slot", func(s local.PoolStats) bool { return s.Ready == 1 })
	_, err = w.WakeSandbox(ctx, "sbx_ws")
	if !errors.Is(err, errdefs.ErrDataLoss) {
		t.Fatalf("wake of a damaged snapshot on a slot: %v, want data_loss", err)
	}
	if ws := w.WakePoolStats(); ws.Taken != 3 {
		t.Fatalf("the damaged wake did not take the slot: %+v", ws)
	}
	if st := wantState(t, w, "sbx_ws", worker.VMSuspended); st.VMMPID != 0 {
		t.Fatalf("a VM runs after a failed wake: %+v", st)
	}
}
