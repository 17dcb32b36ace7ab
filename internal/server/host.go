package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/space-sandbox/space/internal/guest"
	"github.com/space-sandbox/space/internal/storage"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/vmm"
)

// teardown runs what set-up made in reverse order (defer its run).
type teardown []func()

func (t *teardown) add(f func()) { *t = append(*t, f) }

func (t *teardown) run() {
	for i := len(*t) - 1; i >= 0; i-- {
		(*t)[i]()
	}
	*t = nil
}

// host is what a process that runs VMs sets up on its host: the reflink
// data volume, the guest kernel and initramfs, the base template and the
// VMM. Both the single-node server and `spaced worker` start from it; the
// control plane runs no VM and has none.
type host struct {
	storage      *storage.Store
	kernel       guest.Kernel
	initrd       guest.Initramfs
	templatesDir string
	base         template.Metadata
	driver       vmm.Driver
	kernelImage  string // what the driver boots
	// keepVolume is decided as the worker closes: the volume stays mounted
	// while sandbox VMs run on.
	keepVolume bool
}

// prepareHost runs the start-up checks of a host that runs VMs (root, data
// dir, storage, kernel, agent, VMM) and builds the initramfs and the base
// template. Failures are one error naming what is missing. The volume is
// released by td, after everything added to td later.
func prepareHost(ctx context.Context, cfg Config, who string, td *teardown, log *slog.Logger) (*host, error) {
	if err := requireRoot(who); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	st, err := storage.Open(ctx, storage.Config{DataDir: cfg.DataDir}, log)
	if err != nil {
		return nil, err
	}
	h := &host{storage: st, templatesDir: filepath.Join(st.Root(), "templates")}
	// Unmounted last, after everything that uses it has closed.
	td.add(func() { releaseVolume(ctx, st, h.keepVolume, log) })
	if h.kernel, err = guest.Locate(cfg.KernelDir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(cfg.AgentBinary); err != nil {
		return nil, fmt.Errorf("guest agent binary %s not found: build it with `make build` or pass --agent-binary", cfg.AgentBinary)
	}
	h.initrd, err = guest.BuildInitramfs(ctx, h.kernel, guest.InitramfsOptions{
		AgentBinary: cfg.AgentBinary, CacheDir: filepath.Join(cfg.DataDir, "boot"), Logger: log,
	})
	if err != nil {
		return nil, err
	}
	h.base, err = template.BuildBase(ctx, template.BaseOptions{
		TemplatesDir: h.templatesDir, AgentBinary: cfg.AgentBinary, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("build base template: %w", err)
	}
	// A host that cannot run the VMM is one clear error now, not a failed create later.
	if h.driver, h.kernelImage, err = openVMM(ctx, cfg, h.kernel, log); err != nil {
		return nil, err
	}
	return h, nil
}

// requireRoot is the one error of a VM host started without root.
func requireRoot(who string) error {
	if os.Geteuid() != 0 {
		return errors.New(who + " must run as root (it creates loop mounts, VMs and network namespaces)")
	}
	return nil
}
