package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// restoreInto gives sb its own reflink copies of snapshot snap's memory and
// disk and starts its VM restored from snap, running. The caller configures
// the agent. On error no VM is left and sb's live files are removed.
func (w *Worker) restoreInto(ctx context.Context, sb *sandbox, snap string, m manifest) (err error) {
	return w.restoreWith(ctx, sb, snap, m, restoreOpts{})
}

// restoreOpts are the choices of restoreWith.
type restoreOpts struct {
	// verify checks every file of the snapshot against m's checksums while
	// the VMM starts and loads the device state, and resumes no vCPU before
	// the verdict: a damaged snapshot never runs. The memory file and disk
	// are checked in sb's reflink copies, which share their extents with
	// the snapshot's, so what is verified is what the VM maps, and the
	// reads leave the guest RAM in the page cache of the very file the VM
	// maps: its first touches after the resume are no disk reads. (Those
	// pages are charged to the worker's memory cgroup, which read them
	// first, not to the VMM's; they are clean page cache of the sandbox's
	// own memory file, at most its guest RAM.)
	verify bool
	// ph (may be nil) records the steps.
	ph *phases
	// tookSlot (may be nil) is set when the VMM was a wake slot's.
	tookSlot *bool
}

// restoreWith is restoreInto with options.
func (w *Worker) restoreWith(ctx context.Context, sb *sandbox, snap string, m manifest, o restoreOpts) (err error) {
	r, ok := w.cfg.Driver.(vmm.Restorer)
	if !ok {
		return errdefs.New(errdefs.ErrFailedPrecondition, "this worker's VMM cannot restore snapshots")
	}
	ph := o.ph
	defer func() {
		if err != nil {
			_ = os.Remove(sb.path(memFile))
			_ = os.Remove(sb.path(diskFile))
		}
	}()
	// A wake takes a VMM started ahead when one of the snapshot's shape
	// waits (wake_pool.go): the snapshot's files are reflinked onto its.
	var slot vmm.VM
	if o.verify {
		slot = w.takeWakeSlot(ctx, sb, snap, m)
	}
	if slot == nil {
		for _, f := range []string{memFile, diskFile} {
			_ = os.Remove(sb.path(f))
			if err := w.cfg.Storage.Clone(ctx, filepath.Join(snap, f), sb.path(f)); err != nil {
				return fmt.Errorf("copy snapshot %s: %w", f, err)
			}
		}
		if err := os.MkdirAll(sb.path(vmDir), 0o700); err != nil {
			return fmt.Errorf("vm dir: %w: %v", errdefs.ErrInternal, err)
		}
		ph.mark("clone")
	} else {
		ph.mark("take_slot")
		if o.tookSlot != nil {
			*o.tookSlot = true
		}
	}
	verdict := func() error { return nil }
	if o.verify {
		vctx, cancel := context.WithCancel(ctx)
		defer cancel()
		verdict = w.verifyBeside(vctx, sb, snap, m, ph)
	}
	var vm vmm.VM
	if slot != nil {
		vm, err = slot, slot.(vmm.IncomingVM).Incoming(ctx, snap) // stops slot on error
		ph.mark("incoming")
	} else {
		var spec vmm.BootSpec
		if spec, err = w.restoreSpec(sb, m); err == nil {
			vm, err = w.startRestored(ctx, r, spec, snap, ph)
		}
	}
	if err != nil {
		if verr := verdict(); verr != nil {
			return verr // a damaged snapshot explains the failed restore
		}
		return fmt.Errorf("restore vm: %w", err)
	}
	// The link to the old VM (if any) is dead; calls redial the new one.
	sb.agent.Disconnect()
	w.setVM(sb, vm, true)
	sb.mu.Lock()
	sb.paused = true
	sb.mu.Unlock()
	if o.verify {
		if err := verdict(); err != nil {
			w.abandonVM(ctx, sb, false)
			return err
		}
		ph.mark("verdict_wait")
	}
	if err := w.resume(ctx, sb); err != nil {
		w.abandonVM(ctx, sb, false)
		return err
	}
	ph.mark("resume")
	return nil
}

// verifyBeside starts checking snap's files (memory and disk in sb's
// copies) against m and returns the wait for the verdict, which may be
// called more than once. A mismatch is logged and is ErrDataLoss.
func (w *Worker) verifyBeside(ctx context.Context, sb *sandbox, snap string, m manifest, ph *phases) func() error {
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		t0 := time.Now()
		err := snapfile.VerifyFilesAt(ctx, m, func(name string) string {
			if name == memFile || name == diskFile {
				return sb.path(name)
			}
			return filepath.Join(snap, name)
		})
		done <- result{err, time.Since(t0)}
	}()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			r := <-done
			ph.add("verify", r.took)
			if err = r.err; err != nil {
				w.log.Error("snapshot failed verification", "sandbox", sb.spec.ID, "err", causeOf(err))
			}
		})
		return err
	}
}

// startRestored starts a VMM restored from snap, paused: in two timed steps
// (process start, device state load) when the driver offers them.
func (w *Worker) startRestored(ctx context.Context, r vmm.Restorer, spec vmm.BootSpec, snap string, ph *phases) (vmm.VM, error) {
	is, ok := w.cfg.Driver.(vmm.IncomingStarter)
	if !ok {
		vm, err := r.Restore(ctx, spec, snap)
		ph.mark("vmm_restore")
		return vm, err
	}
	vm, err := is.StartIncoming(ctx, spec)
	if err != nil {
		return nil, err
	}
	ph.mark("vmm_start")
	iv, ok := vm.(vmm.IncomingVM)
	if !ok {
		_ = vm.Stop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("vm cannot be restored: %w", errdefs.ErrInternal)
	}
	if err := iv.Incoming(ctx, snap); err != nil { // stops vm on error
		return nil, err
	}
	ph.mark("incoming")
	return vm, nil
}

// abandonVM stops sb's VM after a failed restore; with files it also
// removes the live copies it ran on.
func (w *Worker) abandonVM(ctx context.Context, sb *sandbox, files bool) {
	sb.mu.Lock()
	vm := sb.vm
	sb.vm, sb.paused = nil, false
	sb.mu.Unlock()
	sb.agent.Disconnect()
	if vm != nil {
		if err := vm.Stop(context.WithoutCancel(ctx)); err != nil {
			w.log.Warn("stop vm", "sandbox", sb.spec.ID, "err", err)
		}
	}
	if files {
		_ = os.Remove(sb.path(memFile))
		_ = os.Remove(sb.path(diskFile))
	}
}
