package firecracker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/guest"
	"github.com/space-sandbox/space/internal/vmm"
)

// probeMarker is what a guest kernel prints once it has booted as far as
// looking for its root: the probe boots without one, so the kernel panics
// there (and, with panic=-1 reboot=k, Firecracker exits).
const probeMarker = "VFS: Unable to mount root fs"

// probeBootTimeout bounds the boot probe: a kernel reaches its root well
// within it on KVM; hosts whose KVM hangs real guests never do.
const probeBootTimeout = 20 * time.Second

// vsockModules are what the guest needs for the agent's link under
// Firecracker.
var vsockModules = []string{"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport"}

// CheckGuest is the start-up check of a host and guest kernel for this
// driver, naming what is missing: the guest kernel's vsock modules (the
// agent's link), then a boot of vmlinux (the ELF kernel Firecracker
// loads) in a Firecracker VM that must reach the kernel's root mount.
// Check (the binary and /dev/kvm) comes first.
func (d *Driver) CheckGuest(ctx context.Context, k guest.Kernel, vmlinux string) error {
	if _, err := guest.ResolveModules(k, vsockModules); err != nil {
		return fmt.Errorf("firecracker: the guest kernel %s lacks vsock support (the agent's link): %w", k.Version, err)
	}
	return d.ProbeBoot(ctx, vmlinux)
}

// ProbeBoot boots kernel with nothing to run and waits for probeMarker on
// its console.
func (d *Driver) ProbeBoot(ctx context.Context, kernel string) error {
	dir, err := os.MkdirTemp("", "space-fc-probe-")
	if err != nil {
		return fmt.Errorf("firecracker: probe dir: %w: %v", errdefs.ErrInternal, err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, probeBootTimeout)
	defer cancel()
	vm, err := d.Start(ctx, vmm.BootSpec{ID: "probe", StateDir: dir, Kernel: kernel, VCPUs: 1, MemoryMiB: 128})
	if err != nil {
		return fmt.Errorf("firecracker: the probe VM did not start: %w", err)
	}
	defer vm.Stop(context.WithoutCancel(ctx))
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		booted := strings.Contains(strings.Join(vm.ConsoleTail(200), "\n"), probeMarker)
		if booted {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("firecracker: the probe guest did not boot within %v (a /dev/kvm that cannot run guests?); console: %s: %w",
				probeBootTimeout, strings.Join(vm.ConsoleTail(5), " | "), errdefs.ErrFailedPrecondition)
		case <-vm.Done():
			if strings.Contains(strings.Join(vm.ConsoleTail(200), "\n"), probeMarker) {
				return nil
			}
			return fmt.Errorf("firecracker: the probe VM exited before its kernel booted; console: %s: %w",
				strings.Join(vm.ConsoleTail(5), " | "), errdefs.ErrFailedPrecondition)
		case <-t.C:
		}
	}
}
