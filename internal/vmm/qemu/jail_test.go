package qemu_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/jail/jailtest"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/qemu"
	"github.com/space-sandbox/space/internal/vmm/vmmtest"
)

// TestJailedVMM checks from the host that a booted VMM, one restored from
// its snapshot and the same one adopted by a new driver all run jailed,
// that none sees the other VM's files, and that Stop leaves no cgroup or
// reserved id behind.
func TestJailedVMM(t *testing.T) {
	requireQEMU(t)
	cache := t.TempDir()
	h := vmmtest.Harness{
		NewDriver: func(t *testing.T) vmm.Driver {
			d, err := vmm.Open(qemu.Name, vmm.Options{Accel: "auto", CacheDir: cache})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
	}
	g := vmmtest.BusyboxGuest(t)
	d := h.NewDriver(t)
	files, files2 := t.TempDir(), t.TempDir()
	spec := vmmtest.Spec(t, g)
	spec.MemoryFile = filepath.Join(files, "mem")
	other := vmmtest.Spec(t, g)
	other.ID += "-other"
	other.MemoryFile = filepath.Join(files2, "mem")
	other.Disks = nil // one writer per image

	vm := vmmtest.Start(t, h, d, spec)
	vm2 := vmmtest.Start(t, h, d, other)
	vmmtest.ReadGreeting(t, h, vm, g)
	check := func(name string, v vmm.VM, spec vmm.BootSpec, hidden ...string) *jail.State {
		t.Helper()
		j := v.(*qemu.VM).Jail()
		if j == nil {
			t.Fatalf("%s: no jail recorded", name)
		}
		jailtest.Check(t, v.PID(), *j, qemu.Limits(spec), true, append(hidden, spec.StateDir, filepath.Dir(spec.MemoryFile))...)
		return j
	}
	j1 := check("booted", vm, spec, other.StateDir, files2)
	j2 := check("other", vm2, other, spec.StateDir, files)
	if j1.UID == j2.UID {
		t.Errorf("two VMMs share uid %d", j1.UID)
	}
	owner := func(p string) (uint32, os.FileMode) {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Uid, st.Mode().Perm()
	}
	if uid, mode := owner(spec.MemoryFile); uid != uint32(j1.UID) || mode != 0o600 {
		t.Errorf("memory file owned by %d mode %o, want %d 0600", uid, mode, j1.UID)
	}
	for _, s := range []string{"qmp.sock", "agent.sock"} {
		if uid, mode := owner(filepath.Join(spec.StateDir, s)); uid != 0 || mode != 0o600 {
			t.Errorf("%s owned by %d mode %o, want root 0600", s, uid, mode)
		}
	}
	if err := vm2.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertReleased(t, j2)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := vm.(vmm.Pauser).Pause(ctx); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(files, "snap")
	if err := vm.(vmm.Snapshotter).Snapshot(ctx, snap); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if uid, mode := owner(filepath.Join(snap, qemu.StateFile)); uid != 0 || mode != 0o600 {
		t.Errorf("snapshot state owned by %d mode %o, want root 0600", uid, mode)
	}
	mem2 := filepath.Join(files, "mem2")
	b, err := os.ReadFile(spec.MemoryFile)
	if err != nil || os.WriteFile(mem2, b, 0o600) != nil {
		t.Fatal(err)
	}
	if err := vm.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	assertReleased(t, j1)

	rspec := spec
	rspec.StateDir = t.TempDir()
	rspec.MemoryFile = mem2
	rvm, err := d.(vmm.Restorer).Restore(ctx, rspec, snap)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	pid := rvm.PID()
	t.Cleanup(func() {
		_ = rvm.Stop(context.Background())
		vmmtest.AssertGone(t, pid)
	})
	check("restored", rvm, rspec)
	if err := rvm.(vmm.Detacher).Detach(); err != nil {
		t.Fatal(err)
	}
	avm, err := h.NewDriver(t).Recover(ctx, rspec.StateDir)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if err := avm.(vmm.Pauser).Resume(ctx); err != nil {
		t.Fatal(err)
	}
	vmmtest.ReadGreeting(t, h, avm, g)
	ja := check("adopted", avm, rspec)
	if err := avm.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	assertReleased(t, ja)
}

func assertReleased(t *testing.T, j *jail.State) {
	t.Helper()
	for _, d := range j.Cgroups {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left after Stop (%v)", d, err)
		}
	}
	if jail.InUse(j.UID) {
		t.Errorf("uid %d still reserved after Stop", j.UID)
	}
}
