package qemu

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/vmmtest"
)

// TestMemoryLimitKillsVMM makes a running VMM allocate (and touch) far more
// than its cgroup allows, through QMP (a preallocated RAM backend), as a
// device-model bug that leaks would: the limit kills the VMM, nothing else,
// and the VM's error says so, with class resource_exhausted.
func TestMemoryLimitKillsVMM(t *testing.T) {
	if _, err := exec.LookPath(DefaultBinary); err != nil {
		t.Skipf("needs %s", DefaultBinary)
	}
	d, err := New(vmm.Options{Accel: "auto", CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	g := vmmtest.BusyboxGuest(t)
	spec := vmmtest.Spec(t, g)
	spec.MemoryMiB = 128
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	vm, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	v := vm.(*VM)
	t.Cleanup(func() {
		_ = vm.Stop(context.Background())
		vmmtest.AssertGone(t, v.PID())
	})
	hog := limits(spec).MemoryBytes * 2
	err = v.qmp.Execute(ctx, "object-add", map[string]any{
		"qom-type": "memory-backend-ram", "id": "hog", "size": hog, "prealloc": true,
	}, nil)
	if err == nil {
		t.Fatalf("the VMM allocated %d MiB beyond its limit", hog>>20)
	}
	select {
	case <-vm.Done():
	case <-ctx.Done():
		t.Fatal("VMM not killed by its memory limit")
	}
	if !errors.Is(vm.Err(), errdefs.ErrResourceExhausted) || !strings.Contains(vm.Err().Error(), "memory limit") {
		t.Fatalf("Err = %v, want resource_exhausted naming the memory limit", vm.Err())
	}
}
