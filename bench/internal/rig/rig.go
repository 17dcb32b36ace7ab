// Package rig sets up what the worker-level benchmarks need on this host: a
// data dir on a reflink volume, the guest kernel and an initramfs with the
// given agent, the base template and the QEMU driver. Close undoes it.
package rig

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/space-sandbox/space/internal/guest"
	"github.com/space-sandbox/space/internal/storage"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/vmm"
	_ "github.com/space-sandbox/space/internal/vmm/qemu" // registers the "qemu" driver
	"github.com/space-sandbox/space/internal/worker/local"
)

// Rig is a ready bench environment.
type Rig struct {
	Kernel guest.Kernel
	// Config is a local worker configuration over the rig; benches adjust
	// a copy (pools, snapshots) and call local.New.
	Config  local.Config
	storage *storage.Store
	tmp     string
}

// Open prepares a rig. dataDir "" means a temporary one, removed by Close.
func Open(ctx context.Context, agent, dataDir, accel string, log *slog.Logger) (_ *Rig, err error) {
	r := &Rig{}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if dataDir == "" {
		if r.tmp, err = os.MkdirTemp("", "space-bench-"); err != nil {
			return nil, err
		}
		dataDir = r.tmp
	}
	if r.storage, err = storage.Open(ctx, storage.Config{DataDir: dataDir, ImageSizeGiB: 16}, log); err != nil {
		return nil, err
	}
	if r.Kernel, err = guest.Locate(guest.KernelDirFromEnv()); err != nil {
		return nil, err
	}
	ir, err := guest.BuildInitramfs(ctx, r.Kernel, guest.InitramfsOptions{AgentBinary: agent, CacheDir: filepath.Join(dataDir, "boot")})
	if err != nil {
		return nil, err
	}
	templates := filepath.Join(r.storage.Root(), "templates")
	if _, err := template.BuildBase(ctx, template.BaseOptions{TemplatesDir: templates, AgentBinary: agent}); err != nil {
		return nil, err
	}
	driver, err := vmm.Open("qemu", vmm.Options{Accel: accel, CacheDir: filepath.Join(dataDir, "cache"), Logger: log})
	if err != nil {
		return nil, err
	}
	r.Config = local.Config{Storage: r.storage, Driver: driver, Kernel: r.Kernel.Vmlinuz, Initrd: ir.Path,
		TemplatesDir: templates, Logger: log,
		// A machine loaded by other work boots far slower than the default allows.
		BootTimeout: 10 * time.Minute}
	return r, nil
}

// Close unmounts the volume and removes a temporary data dir. Close the
// workers made from Config first.
func (r *Rig) Close() {
	if r.storage != nil {
		r.storage.Unmount(context.Background())
	}
	if r.tmp != "" {
		os.RemoveAll(r.tmp)
	}
}
