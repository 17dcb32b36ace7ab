package vmmtest

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/space-sandbox/space/internal/vmm"
)

// testSnapshotRestore snapshots a paused VM whose RAM is in a memory file,
// stops it, and restores a new VM from the snapshot and a copy of the
// memory file; the restored guest must carry on writing to its agent link.
func testSnapshotRestore(t *testing.T, h Harness) {
	d := h.NewDriver(t)
	r, ok := d.(vmm.Restorer)
	if !ok {
		t.Skip("driver has no Restorer")
	}
	g := h.Guest(t)
	files := t.TempDir()
	spec := Spec(t, g)
	spec.MemoryFile = filepath.Join(files, "mem")
	vm := Start(t, h, d, spec)
	s, ok := vm.(vmm.Snapshotter)
	p, ok2 := vm.(vmm.Pauser)
	if !ok || !ok2 {
		t.Skip("driver restores but its VMs have no Snapshotter/Pauser")
	}
	ReadGreeting(t, h, vm, g)
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout())
	defer cancel()
	if err := p.Pause(ctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	snap := filepath.Join(files, "snap")
	if err := s.Snapshot(ctx, snap); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	// The snapshot's memory must stay immutable: restore from a copy.
	mem2 := filepath.Join(files, "mem2")
	copyFile(t, spec.MemoryFile, mem2)
	if err := vm.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}

	spec2 := spec
	spec2.StateDir = t.TempDir()
	spec2.MemoryFile = mem2
	vm2, err := r.Restore(ctx, spec2, snap)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	pid := vm2.PID()
	t.Cleanup(func() {
		_ = vm2.Stop(context.Background())
		AssertGone(t, pid)
	})
	if err := vm2.(vmm.Pauser).Resume(ctx); err != nil {
		t.Fatalf("Resume restored VM: %v", err)
	}
	ReadGreeting(t, h, vm2, g)
	if err := vm2.Stop(ctx); err != nil {
		t.Fatalf("Stop restored VM: %v", err)
	}
	AssertEmptyDir(t, spec2.StateDir)
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
