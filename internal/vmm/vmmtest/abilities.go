package vmmtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/space-sandbox/space/internal/vmm"
)

// testCheck: a driver that checks its host finds nothing missing on a host
// the suite runs on.
func testCheck(t *testing.T, h Harness) {
	c, ok := h.NewDriver(t).(vmm.Checker)
	if !ok {
		t.Skip("driver has no Checker")
	}
	if err := c.Check(context.Background()); err != nil {
		t.Fatalf("Check on a host that runs the suite: %v", err)
	}
}

// testRunState: a VM says running after boot, paused after Pause (and
// after a snapshot), running again after Resume.
func testRunState(t *testing.T, h Harness) {
	g := h.Guest(t)
	vm := Start(t, h, h.NewDriver(t), Spec(t, g))
	s, ok := vm.(vmm.StatusReporter)
	p, ok2 := vm.(vmm.Pauser)
	if !ok || !ok2 {
		t.Skip("driver's VMs have no StatusReporter or Pauser")
	}
	ReadGreeting(t, h, vm, g)
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout())
	defer cancel()
	want := func(what string, st vmm.RunState) {
		t.Helper()
		got, err := s.RunState(ctx)
		if err != nil || got != st {
			t.Fatalf("%s: RunState = %q, %v; want %q", what, got, err, st)
		}
	}
	want("after boot", vmm.RunRunning)
	if err := p.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	want("after Pause", vmm.RunPaused)
	if err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	want("after Resume", vmm.RunRunning)
}

// testIncoming: a VMM started ahead of a restore waits (not started), loads
// a snapshot, is relocated under a new state dir and name while it runs,
// resumes, and is found there by a second driver instance.
func testIncoming(t *testing.T, h Harness) {
	d := h.NewDriver(t)
	is, ok := d.(vmm.IncomingStarter)
	if !ok {
		t.Skip("driver has no IncomingStarter")
	}
	g := h.Guest(t)
	files := t.TempDir()
	spec := Spec(t, g)
	spec.MemoryFile = filepath.Join(files, "mem")
	vm := Start(t, h, d, spec)
	s, ok1 := vm.(vmm.Snapshotter)
	p, ok2 := vm.(vmm.Pauser)
	if !ok1 || !ok2 {
		t.Skip("driver starts incoming VMs but cannot snapshot")
	}
	ReadGreeting(t, h, vm, g)
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout())
	defer cancel()
	if err := p.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(files, "snap")
	if err := s.Snapshot(ctx, snap); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if err := vm.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// The pool's way: the VMM starts first, on the files it will own.
	spec2 := spec
	spec2.ID = spec.ID + "-pool"
	spec2.StateDir = filepath.Join(t.TempDir(), "pool")
	if err := os.Mkdir(spec2.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	spec2.MemoryFile = filepath.Join(files, "mem2")
	copyFile(t, spec.MemoryFile, spec2.MemoryFile)
	vm2, err := is.StartIncoming(ctx, spec2)
	if err != nil {
		t.Fatalf("StartIncoming: %v", err)
	}
	pid := vm2.PID()
	t.Cleanup(func() {
		_ = vm2.Stop(context.Background())
		AssertGone(t, pid)
	})
	iv, ok := vm2.(vmm.IncomingVM)
	if !ok {
		t.Fatal("a VM from StartIncoming is no IncomingVM")
	}
	if sr, ok := vm2.(vmm.StatusReporter); ok {
		if st, err := sr.RunState(ctx); err != nil || st != vmm.RunNotStarted {
			t.Errorf("waiting VMM: RunState = %q, %v; want %q", st, err, vmm.RunNotStarted)
		}
	}
	if err := iv.Incoming(ctx, snap); err != nil {
		t.Fatalf("Incoming: %v", err)
	}
	// Taken by a sandbox: its dir and memory file are renamed while it runs.
	spec3 := spec2
	spec3.ID = spec.ID + "-taken"
	spec3.StateDir = filepath.Join(filepath.Dir(spec2.StateDir), "taken")
	spec3.MemoryFile = filepath.Join(files, "mem3")
	if err := os.Rename(spec2.StateDir, spec3.StateDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(spec2.MemoryFile, spec3.MemoryFile); err != nil {
		t.Fatal(err)
	}
	if err := iv.Relocate(spec3); err != nil {
		t.Fatalf("Relocate: %v", err)
	}
	if err := vm2.(vmm.Pauser).Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	ReadGreeting(t, h, vm2, g)
	// A restarted worker finds it under its new dir.
	if det, ok := vm2.(vmm.Detacher); ok {
		if err := det.Detach(); err != nil {
			t.Fatal(err)
		}
		vm3, err := h.NewDriver(t).Recover(ctx, spec3.StateDir)
		if err != nil {
			t.Fatalf("Recover after Relocate: %v", err)
		}
		if vm3.PID() != pid || vm3.ID() != spec3.ID {
			t.Errorf("recovered %s (pid %d), want %s (pid %d)", vm3.ID(), vm3.PID(), spec3.ID, pid)
		}
		vm2 = vm3
		ReadGreeting(t, h, vm3, g)
	}
	if err := vm2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	AssertEmptyDir(t, spec3.StateDir)
}
