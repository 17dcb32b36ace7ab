package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// statuser is a VM that reports its run state ("running", "paused", ...).
type statuser interface {
	Status(ctx context.Context) (string, error)
}

// adoptAll finds the sandboxes a previous process left: it adopts their
// running VMs, knows suspended ones by their sealed snapshot, and removes
// whatever an interrupted snapshot left half-written.
func (w *Worker) adoptAll(ctx context.Context) error {
	w.removeUnfinished(w.checkpointsDir(), ".tmp")
	w.removeUnfinished(w.templateSnapshotsDir(), ".tmp-")
	w.stopTemplateBuilds(ctx)
	entries, err := os.ReadDir(w.root)
	if err != nil {
		return fmt.Errorf("local worker: read %s: %w", w.root, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := w.dir(e.Name())
		var spec worker.SandboxSpec
		if err := readJSON(filepath.Join(dir, specFile), &spec); err != nil || spec.ID != e.Name() {
			w.log.Warn("removing unreadable sandbox dir", "dir", e.Name(), "err", err)
			_ = removeAll(dir)
			continue
		}
		sb := newSandbox(spec, dir, w.log)
		if err := w.adopt(ctx, sb); err != nil {
			return err
		}
		// The listeners died with the old process; the namespace (and the
		// VM's tap in it) did not. Re-open and re-attach under the kept policy.
		if err := w.netUp(ctx, sb, true); err != nil {
			w.log.Warn("sandbox network not restored", "sandbox", spec.ID, "err", err)
		}
		w.mu.Lock()
		w.sandboxes[sb.spec.ID] = sb
		w.mu.Unlock()
	}
	return nil
}

func (w *Worker) adopt(ctx context.Context, sb *sandbox) error {
	id := sb.spec.ID
	interrupted := false
	if _, err := os.Stat(sb.path(suspendTmp)); err == nil {
		interrupted = true
		_ = os.RemoveAll(sb.path(suspendTmp))
	}
	sealed := false
	if _, err := os.Stat(filepath.Join(sb.path(suspendDir), manifestFile)); err == nil {
		sealed = true
	} else {
		_ = os.RemoveAll(sb.path(suspendDir))
	}
	vm, err := w.cfg.Driver.Recover(ctx, sb.path(vmDir))
	switch {
	case err == nil && sealed:
		// The suspend was sealed (or a wake had not finished): the snapshot
		// is the sandbox, the VM is a leftover.
		if err := vm.Stop(ctx); err != nil {
			return fmt.Errorf("local worker: stop leftover VM of suspended %s: %w", id, err)
		}
		w.markSuspended(sb)
	case err == nil:
		sb.vm = vm
		go w.watch(sb, vm)
		if s, ok := vm.(statuser); ok {
			if st, err := s.Status(ctx); err == nil && st == "paused" {
				sb.paused = true
			}
		}
		if interrupted {
			// A suspend died before sealing: the VM may be paused with its
			// filesystems frozen. Put it back to running.
			w.undoSnapshotPause(ctx, sb, true, false)
		}
		w.log.Info("adopted sandbox VM", "sandbox", id, "vmm_pid", vm.PID(), "paused", sb.paused)
	case errors.Is(err, errdefs.ErrNotFound) && sealed:
		w.markSuspended(sb)
	case errors.Is(err, errdefs.ErrNotFound):
		w.log.Warn("sandbox VM is gone", "sandbox", id)
	default:
		return fmt.Errorf("local worker: recover %s: %w", id, err)
	}
	return nil
}

func (w *Worker) markSuspended(sb *sandbox) {
	sb.suspended = true
	_ = os.Remove(sb.path(memFile))
	_ = os.Remove(sb.path(diskFile))
	w.log.Info("found suspended sandbox", "sandbox", sb.spec.ID)
}

// removeUnfinished removes the entries of dir whose name contains marker
// (snapshots a crashed process left half-written).
func (w *Worker) removeUnfinished(dir, marker string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), marker) {
			w.log.Warn("removing unfinished snapshot", "dir", filepath.Join(filepath.Base(dir), e.Name()))
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// stopTemplateBuilds stops the VMs of template snapshots a crashed process
// was making, and removes their state dirs.
func (w *Worker) stopTemplateBuilds(ctx context.Context) {
	dirs, _ := filepath.Glob(filepath.Join(filepath.Dir(w.templateSnapshotsDir()), "vm-*"))
	for _, d := range dirs {
		if vm, err := w.cfg.Driver.Recover(ctx, d); err == nil {
			_ = vm.Stop(ctx)
		}
		_ = os.RemoveAll(d)
	}
}
