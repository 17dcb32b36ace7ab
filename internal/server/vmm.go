package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/space-sandbox/space/internal/guest"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/firecracker" // registers the "firecracker" driver
	"github.com/space-sandbox/space/internal/vmm/qemu"        // registers the "qemu" driver
)

// openVMM opens the driver --vmm names and runs its start-up checks, so a
// host that cannot run it fails now with one error naming what is missing
// rather than at every create. It returns the kernel image the driver
// boots: QEMU takes the bzImage, Firecracker an ELF vmlinux extracted from
// it.
func openVMM(ctx context.Context, cfg Config, k guest.Kernel, log *slog.Logger) (vmm.Driver, string, error) {
	opts := vmm.Options{Accel: cfg.Accel, CacheDir: filepath.Join(cfg.DataDir, "cache"), Logger: log}
	switch cfg.VMM {
	case qemu.Name:
		opts.Binary = cfg.QEMUBinary
		d, err := qemu.New(opts)
		if err != nil {
			return nil, "", err
		}
		if err := d.Check(ctx); err != nil {
			return nil, "", err
		}
		return d, k.Vmlinuz, nil
	case firecracker.Name:
		opts.Binary = cfg.FirecrackerBinary
		d, err := firecracker.New(opts)
		if err != nil {
			return nil, "", err
		}
		if err := d.Check(ctx); err != nil {
			return nil, "", err
		}
		vmlinux, err := guest.Vmlinux(k, filepath.Join(cfg.DataDir, "boot"))
		if err != nil {
			return nil, "", err
		}
		if err := d.CheckGuest(ctx, k, vmlinux); err != nil {
			return nil, "", err
		}
		return d, vmlinux, nil
	}
	return nil, "", fmt.Errorf("--vmm must be one of %v, not %q", vmm.Drivers(), cfg.VMM)
}
