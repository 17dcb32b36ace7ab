package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/faultinject"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// snapshotMargin is the free space a snapshot needs besides its reflinks
// (device state, manifest, metadata of the clones).
const snapshotMargin = 64 << 20

// lifecycle looks up a sandbox and takes its op lock; the caller runs done.
func (w *Worker) lifecycle(id string) (*sandbox, func(), error) {
	sb, err := w.lookup(id)
	if err != nil {
		return nil, nil, err
	}
	sb.op.Lock()
	sb.mu.Lock()
	deleting := sb.deleting
	sb.mu.Unlock()
	if deleting {
		sb.op.Unlock()
		return nil, nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return sb, sb.op.Unlock, nil
}

func wrongState(state worker.VMState, want string) error {
	return errdefs.New(errdefs.ErrConflict, "sandbox is %s; %s", state, want).
		WithDetails(map[string]any{"state": string(state)})
}

// PauseSandbox implements worker.Lifecycle.
func (w *Worker) PauseSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	sb, done, err := w.lifecycle(id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	defer done()
	switch st := sb.state(); st {
	case worker.VMPaused:
		return sb.status(), nil
	case worker.VMRunning:
	default:
		return worker.SandboxStatus{}, wrongState(st, "only a running sandbox can be paused")
	}
	p, ok := sb.vm.(vmm.Pauser)
	if !ok {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrFailedPrecondition, "this worker's VMM cannot pause")
	}
	if err := p.Pause(ctx); err != nil {
		return worker.SandboxStatus{}, fmt.Errorf("pause: %w", err)
	}
	faultinject.Point("pause.paused")
	sb.mu.Lock()
	sb.paused = true
	sb.mu.Unlock()
	return sb.status(), nil
}

// ResumeSandbox implements worker.Lifecycle.
func (w *Worker) ResumeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	sb, done, err := w.lifecycle(id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	defer done()
	switch st := sb.state(); st {
	case worker.VMRunning:
		return sb.status(), nil
	case worker.VMPaused:
		return sb.status(), w.resume(ctx, sb)
	default:
		return worker.SandboxStatus{}, wrongState(st, "only a paused sandbox can be resumed")
	}
}

func (w *Worker) resume(ctx context.Context, sb *sandbox) error {
	if err := sb.vm.(vmm.Pauser).Resume(ctx); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	sb.mu.Lock()
	sb.paused = false
	sb.mu.Unlock()
	return nil
}

// WakeSandbox implements worker.Lifecycle.
func (w *Worker) WakeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	sb, done, err := w.lifecycle(id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	defer done()
	switch st := sb.state(); st {
	case worker.VMRunning:
		return sb.status(), nil
	case worker.VMPaused:
		if err := w.resume(ctx, sb); err != nil {
			return worker.SandboxStatus{}, err
		}
		return sb.status(), nil
	case worker.VMSuspended:
	default:
		return worker.SandboxStatus{}, wrongState(st, "only a paused or suspended sandbox can be woken")
	}
	return w.wakeSuspended(ctx, sb)
}

// wakeSuspended restores suspended sb from its suspend snapshot; sb's op
// lock is held.
func (w *Worker) wakeSuspended(ctx context.Context, sb *sandbox) (worker.SandboxStatus, error) {
	id := sb.spec.ID
	started := time.Now()
	ph := startPhases()
	snap := sb.path(suspendDir)
	m, err := snapfile.ReadManifest(snap)
	if err != nil {
		w.log.Error("suspend snapshot failed verification", "sandbox", id, "err", causeOf(err))
		return worker.SandboxStatus{}, err
	}
	// Verified while the VMM starts (restoreOpts.verify): a damaged
	// snapshot never runs, and a failed wake leaves the sandbox suspended.
	var slot bool
	if err := w.restoreWith(ctx, sb, snap, m, restoreOpts{verify: true, ph: ph, tookSlot: &slot}); err != nil {
		sb.mu.Lock()
		sb.suspended = true
		sb.mu.Unlock()
		return worker.SandboxStatus{}, err
	}
	if err := w.thawAndConfigure(ctx, sb, m, ph); err != nil {
		w.abandonVM(ctx, sb, true)
		sb.mu.Lock()
		sb.suspended = true
		sb.mu.Unlock()
		return worker.SandboxStatus{}, err
	}
	faultinject.Point("wake.restored")
	// Running again from its own copies: the snapshot has served.
	if err := os.RemoveAll(snap); err != nil {
		w.log.Warn("remove suspend snapshot", "sandbox", id, "err", err)
	}
	w.dropSuspendObject(ctx, id)
	ph.log(w.log, "wake phases", "sandbox", id)
	w.log.Info("sandbox woken", "sandbox", id, "prestarted_vmm", slot, "took", time.Since(started).Round(time.Millisecond))
	return sb.status(), nil
}

// thawAndConfigure configures the agent of a sandbox restored from its
// suspend snapshot, and thaws its filesystems when the snapshot says the
// guest was frozen (made by a worker before suspends stopped freezing):
// both calls at once on the one link.
func (w *Worker) thawAndConfigure(ctx context.Context, sb *sandbox, m manifest, ph *phases) error {
	if !m.GuestFrozen() {
		if err := w.configure(ctx, sb.agent, sb.spec); err != nil {
			return fmt.Errorf("configure agent after wake: %w", err)
		}
		ph.mark("link_configure")
		return nil
	}
	thawed := make(chan error, 1)
	go func() { thawed <- sb.agent.Thaw(ctx) }()
	err := w.configure(ctx, sb.agent, sb.spec)
	if terr := <-thawed; terr != nil {
		return fmt.Errorf("thaw guest filesystems: %w", terr)
	}
	if err != nil {
		return fmt.Errorf("configure agent after wake: %w", err)
	}
	ph.mark("link_thaw_configure")
	return nil
}

// SuspendSandbox implements worker.Lifecycle.
func (w *Worker) SuspendSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	sb, done, err := w.lifecycle(id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	defer done()
	st := sb.state()
	switch st {
	case worker.VMSuspended:
		return sb.status(), nil
	case worker.VMRunning, worker.VMPaused:
	default:
		return worker.SandboxStatus{}, wrongState(st, "only a running or paused sandbox can be suspended")
	}
	started := time.Now()
	wasPaused := st == worker.VMPaused
	vm := sb.vm
	// The guest filesystems are not frozen (nor a paused sandbox resumed
	// for it): the snapshot is the guest's memory and its disk at one
	// paused instant (QEMU's stop drains and flushes the disk's in-flight
	// I/O; the disk is cache=none), and nothing ever uses the disk without
	// that memory (every restore is of both, as in a live migration), so
	// the page cache, journal and dirty data in memory match the disk.
	if err := sb.markTransient(transient{Op: "suspend", WasPaused: wasPaused}); err != nil {
		return worker.SandboxStatus{}, err
	}
	faultinject.Point("suspend.recorded")
	tmp := sb.path(suspendTmp)
	if err := w.snapshotPaused(ctx, sb, tmp); err != nil {
		w.undoSnapshotPause(ctx, sb, wasPaused)
		return worker.SandboxStatus{}, err
	}
	faultinject.Point("suspend.saved")
	m := manifest{CreatedAt: time.Now().UTC(), VCPUs: sb.spec.VCPUs, MemoryMiB: sb.spec.MemoryMiB, DeviceSet: sb.devices,
		Frozen: new(bool)}
	err = snapfile.Seal(ctx, tmp, m)
	if err == nil {
		// With an object store the suspend counts once the snapshot is
		// stored there and verified (suspend_upload.go); until then the
		// sandbox can still go on where it is.
		if uerr := w.uploadSuspend(ctx, sb, tmp); uerr != nil {
			_ = os.RemoveAll(tmp)
			w.undoSnapshotPause(ctx, sb, wasPaused)
			return worker.SandboxStatus{}, uerr
		}
		err = os.Rename(tmp, sb.path(suspendDir))
		if err == nil {
			err = snapfile.SyncDir(sb.dir)
		}
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		_ = os.RemoveAll(sb.path(suspendDir))
		w.undoSnapshotPause(ctx, sb, wasPaused)
		return worker.SandboxStatus{}, snapfile.DiskError("seal suspend snapshot", err)
	}
	// Sealed: from here the snapshot is the sandbox. Release the VM.
	faultinject.Point("suspend.sealed")
	sb.clearTransient()
	if shape, ok := shapeOf(sb); ok {
		w.wakes.want(shape) // a VMM of this shape waits for the wake
	}
	sb.mu.Lock()
	sb.vm, sb.paused, sb.suspended = nil, false, true
	sb.mu.Unlock()
	sb.agent.Disconnect()
	if err := vm.Stop(ctx); err != nil {
		w.log.Warn("stop suspended VM", "sandbox", id, "err", err)
	}
	_ = os.Remove(sb.path(memFile))
	_ = os.Remove(sb.path(diskFile))
	w.log.Info("sandbox suspended", "sandbox", id, "took", time.Since(started).Round(time.Millisecond),
		"snapshot_bytes", snapfile.DirBytes(sb.path(suspendDir)))
	return sb.status(), nil
}

// snapshotPaused pauses sb's VM and writes a snapshot of it into dir (which
// must not exist): device state, then reflinks of the memory file and the
// disk. The VM stays paused; on error dir is removed.
func (w *Worker) snapshotPaused(ctx context.Context, sb *sandbox, dir string) (err error) {
	p, ok1 := sb.vm.(vmm.Pauser)
	s, ok2 := sb.vm.(vmm.Snapshotter)
	if !ok1 || !ok2 {
		return errdefs.New(errdefs.ErrFailedPrecondition, "this worker's VMM cannot snapshot")
	}
	if err := w.cfg.Storage.EnsureFree(ctx, snapshotMargin); err != nil {
		return err
	}
	_ = os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return snapfile.DiskError("snapshot dir", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := p.Pause(ctx); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	sb.mu.Lock()
	sb.paused = true
	sb.mu.Unlock()
	if err := s.Snapshot(ctx, dir); err != nil {
		return w.classifyDisk("save device state", err)
	}
	for _, f := range []string{memFile, diskFile} {
		if err := w.cfg.Storage.Clone(ctx, sb.path(f), filepath.Join(dir, f)); err != nil {
			return w.classifyDisk("copy "+f, err)
		}
	}
	return nil
}

// classifyDisk makes a failure while the volume is (nearly) full a
// resource_exhausted error: the driver only sees its helper fail.
func (w *Worker) classifyDisk(what string, err error) error {
	if errors.Is(err, errdefs.ErrResourceExhausted) {
		return err
	}
	if free, ferr := w.cfg.Storage.Free(context.Background()); ferr == nil && free < snapshotMargin {
		return snapfile.DiskError(what, fmt.Errorf("%w (%d bytes free)", errdefs.ErrResourceExhausted, free))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// undoSnapshotPause puts a sandbox back as it was before a failed suspend.
// A VM that was paused is resumed and paused again even so: a migration to
// a file that completed left QEMU's disk inactive, and a resume is what
// activates it again (a second migration of an inactive disk fails).
func (w *Worker) undoSnapshotPause(ctx context.Context, sb *sandbox, wasPaused bool) {
	ctx = context.WithoutCancel(ctx)
	if sb.state() == worker.VMPaused {
		if err := w.resume(ctx, sb); err != nil {
			w.log.Error("resume after failed snapshot", "sandbox", sb.spec.ID, "err", err)
			return
		}
	}
	if wasPaused {
		if err := sb.vm.(vmm.Pauser).Pause(ctx); err == nil {
			sb.mu.Lock()
			sb.paused = true
			sb.mu.Unlock()
		}
	}
	sb.clearTransient()
}

// causeOf is the internal cause of a public error, for logs.
func causeOf(err error) error {
	var pub *errdefs.Public
	if errors.As(err, &pub) && pub.Cause != nil {
		return fmt.Errorf("%v: %w", err, pub.Cause)
	}
	return err
}
