package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// adoptParallel bounds the sandboxes adopted at once after a restart: each
// may take up to adoptionTimeout (a VMM slow to answer), and one at a time
// a host of many sandboxes would take that many times longer to serve.
const adoptParallel = 8

// adoptAll finds the sandboxes a previous process left: it adopts their
// running VMs, knows suspended ones by their sealed snapshot, and removes
// whatever an interrupted snapshot left half-written. Up to adoptParallel
// sandboxes are adopted at once, each within adoptionTimeout.
func (w *Worker) adoptAll(ctx context.Context) error {
	w.removeUnfinished(w.checkpointsDir(), ".tmp")
	w.removeUnfinished(w.templateSnapshotsDir(), ".tmp-")
	w.stopTemplateBuilds(ctx)
	entries, err := os.ReadDir(w.root)
	if err != nil {
		return fmt.Errorf("local worker: read %s: %w", w.root, err)
	}
	var g errgroup.Group
	g.SetLimit(adoptParallel)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := w.dir(e.Name())
		var spec worker.SandboxSpec
		if err := snapfile.ReadJSON(filepath.Join(dir, specFile), &spec); err != nil || spec.ID != e.Name() {
			w.log.Warn("removing unreadable sandbox dir", "dir", e.Name(), "err", err)
			_ = removeAll(dir)
			continue
		}
		g.Go(func() error {
			w.adoptOne(ctx, w.newSandbox(spec, dir))
			return nil
		})
	}
	return g.Wait()
}

// adoptOne adopts sb and makes it known; a sandbox that cannot be recovered
// is known as stopped, with the reason.
func (w *Worker) adoptOne(ctx context.Context, sb *sandbox) {
	if err := w.adopt(ctx, sb); err != nil {
		// One sandbox that cannot be recovered must not keep the
		// others (or the server) from starting: it stays known as
		// stopped and is failed by the control plane.
		w.log.Error("sandbox not recovered", "sandbox", sb.spec.ID, "err", err)
		sb.vm = nil
		sb.lost = "the sandbox could not be recovered after a server restart"
	}
	// The listeners died with the old process; the namespace (and the
	// VM's tap in it) did not. Re-open and re-attach under the kept policy.
	if err := w.netUp(ctx, sb, true); err != nil {
		w.log.Warn("sandbox network not restored", "sandbox", sb.spec.ID, "err", err)
	}
	w.mu.Lock()
	w.sandboxes[sb.spec.ID] = sb
	w.mu.Unlock()
}

func (w *Worker) adopt(ctx context.Context, sb *sandbox) error {
	ctx, cancel := context.WithTimeout(ctx, adoptionTimeout)
	defer cancel()
	id := sb.spec.ID
	// A suspend snapshot being written when the process died is incomplete.
	_ = os.RemoveAll(sb.path(suspendTmp))
	sealed := false
	if _, err := os.Stat(filepath.Join(sb.path(suspendDir), manifestFile)); err == nil {
		sealed = true
	} else {
		_ = os.RemoveAll(sb.path(suspendDir))
	}
	step, inStep := sb.readTransient()
	sb.devices = sb.recordedDeviceSet()
	vm, err := w.cfg.Driver.Recover(ctx, sb.path(vmDir))
	switch {
	case err == nil && sealed:
		// The suspend was sealed (or a wake had not finished): the snapshot
		// is the sandbox, the VM is a leftover.
		if err := vm.Stop(ctx); err != nil {
			return fmt.Errorf("local worker: stop leftover VM of suspended %s: %w", id, err)
		}
		sb.clearTransient()
		w.markSuspended(sb)
	case err == nil:
		sb.vm = vm
		go w.watch(sb, vm)
		st, err := vmRunState(ctx, vm)
		if err != nil {
			w.abandonAdopted(ctx, sb, fmt.Errorf("run state: %w", err))
			return nil
		}
		sb.paused = st == worker.VMPaused
		if inStep {
			// A suspend or checkpoint died half-way: the VM may be paused
			// and its filesystems frozen by us, not by its user.
			if err := w.undoTransient(ctx, sb, step); err != nil {
				w.abandonAdopted(ctx, sb, fmt.Errorf("undo interrupted %s: %w", step.Op, err))
				return nil
			}
			w.log.Info("undid interrupted step", "sandbox", id, "step", step.Op, "paused", sb.paused)
		}
		w.log.Info("adopted sandbox VM", "sandbox", id, "vmm_pid", vm.PID(), "paused", sb.paused)
	case errors.Is(err, errdefs.ErrNotFound) && sealed:
		sb.clearTransient()
		w.markSuspended(sb)
	case errors.Is(err, errdefs.ErrNotFound):
		sb.clearTransient()
		sb.lost = "the sandbox's VM was gone after a server restart"
		w.log.Warn("sandbox VM is gone", "sandbox", id)
	default:
		return fmt.Errorf("local worker: recover %s: %w", id, err)
	}
	return nil
}

// abandonAdopted stops the VM of a sandbox that cannot be brought back to a
// state its user would recognise; the sandbox stays known as stopped, with
// the reason, for the control plane to fail and its user to delete.
func (w *Worker) abandonAdopted(ctx context.Context, sb *sandbox, cause error) {
	w.log.Error("sandbox not recovered after restart; stopping its VM", "sandbox", sb.spec.ID, "err", cause)
	vm := sb.vm
	sb.mu.Lock()
	sb.vm, sb.paused = nil, false
	sb.lost = "the sandbox could not be recovered after a server restart"
	sb.mu.Unlock()
	if err := vm.Stop(context.WithoutCancel(ctx)); err != nil {
		w.log.Error("stop unrecoverable VM", "sandbox", sb.spec.ID, "err", err)
	}
	sb.clearTransient()
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
