package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/space-sandbox/space/internal/storage"
	"github.com/space-sandbox/space/internal/worker"
)

// sandboxLister is what shutdown asks the worker before closing it.
type sandboxLister interface {
	Sandboxes(ctx context.Context) ([]worker.SandboxStatus, error)
}

// vmsLeftRunning reports whether sandbox VMs outlive this process: the
// local worker's Close leaves running and paused VMs for the next spaced to
// adopt, and their disks and memory files live on the data volume. When the
// worker cannot say, the volume is kept.
func vmsLeftRunning(ctx context.Context, wk sandboxLister, log *slog.Logger) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	sbs, err := wk.Sandboxes(ctx)
	if err != nil {
		log.Warn("shutdown: cannot list sandboxes; the data volume stays mounted", "err", err)
		return true
	}
	n := 0
	for _, sb := range sbs {
		if sb.State == worker.VMRunning || sb.State == worker.VMPaused {
			n++
		}
	}
	if n > 0 {
		log.Info("shutdown: sandbox VMs keep running for the next start; the data volume stays mounted", "vms", n)
	}
	return n > 0
}

// releaseVolume undoes at shutdown what storage.Open mounted: it unmounts
// the loop-mounted data volume, which detaches its loop device, unless keep
// (VMs still use it). Nothing to do when the data dir reflinks natively; a
// volume still busy stays mounted and the next start reuses it.
func releaseVolume(ctx context.Context, st *storage.Store, keep bool, log *slog.Logger) {
	if keep || st.Image() == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := st.Unmount(ctx); err != nil {
		log.Warn("shutdown: data volume stays mounted", "err", err)
	}
}
