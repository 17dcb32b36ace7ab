package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/faultinject"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// A checkpoint is a sealed snapshot dir under <root>/checkpoints/<id>, with
// checkpointMetaFile describing it. Branches and in-place restores copy its
// files (reflinks), so nothing ever depends on a checkpoint after it has been
// copied: deleting it only has to wait for copies in progress (ckMu).
const checkpointMetaFile = "checkpoint.json"

type checkpointMeta struct {
	ID        string             `json:"id"`
	SandboxID string             `json:"sandbox_id"`
	Spec      worker.SandboxSpec `json:"spec"`
	CreatedAt time.Time          `json:"created_at"`
	Paused    time.Duration      `json:"paused_ns"`
}

func (w *Worker) checkpointsDir() string { return filepath.Join(w.cfg.Storage.Root(), "checkpoints") }

func (w *Worker) checkpointDir(id string) string { return filepath.Join(w.checkpointsDir(), id) }

func (w *Worker) checkpointStatus(m checkpointMeta) worker.CheckpointStatus {
	return worker.CheckpointStatus{ID: m.ID, SandboxID: m.SandboxID, Spec: m.Spec, CreatedAt: m.CreatedAt,
		SizeBytes: snapfile.DirBytes(w.checkpointDir(m.ID)), Paused: m.Paused}
}

// loadCheckpoint reads a sealed checkpoint's description.
func (w *Worker) loadCheckpoint(id string) (checkpointMeta, error) {
	var m checkpointMeta
	if !validID(id) {
		return m, fmt.Errorf("checkpoint id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	dir := w.checkpointDir(id)
	if _, err := os.Stat(filepath.Join(dir, manifestFile)); err != nil {
		return m, errdefs.New(errdefs.ErrNotFound, "checkpoint %s not found", id)
	}
	if err := snapfile.ReadJSON(filepath.Join(dir, checkpointMetaFile), &m); err != nil || m.ID != id {
		return m, snapfile.DataLoss("checkpoint description unreadable", err)
	}
	return m, nil
}

// Checkpoint implements worker.Lifecycle.
func (w *Worker) Checkpoint(ctx context.Context, sandboxID, checkpointID string) (worker.CheckpointStatus, error) {
	if !validID(checkpointID) {
		return worker.CheckpointStatus{}, fmt.Errorf("checkpoint id %q: %w", checkpointID, errdefs.ErrInvalidArgument)
	}
	sb, done, err := w.lifecycle(sandboxID)
	if err != nil {
		return worker.CheckpointStatus{}, err
	}
	defer done()
	st := sb.state()
	if st != worker.VMRunning && st != worker.VMPaused {
		return worker.CheckpointStatus{}, wrongState(st, "only a running or paused sandbox can be checkpointed")
	}
	dir := w.checkpointDir(checkpointID)
	if _, err := os.Stat(dir); err == nil {
		return worker.CheckpointStatus{}, fmt.Errorf("checkpoint %s exists: %w", checkpointID, errdefs.ErrConflict)
	}
	if err := os.MkdirAll(w.checkpointsDir(), 0o700); err != nil {
		return worker.CheckpointStatus{}, snapfile.DiskError("checkpoints dir", err)
	}
	tmp := dir + ".tmp"
	if err := sb.markTransient(transient{Op: "checkpoint", WasPaused: st == worker.VMPaused}); err != nil {
		return worker.CheckpointStatus{}, err
	}
	stopped := time.Now()
	err = w.snapshotPaused(ctx, sb, tmp)
	faultinject.Point("checkpoint.paused")
	if st == worker.VMRunning && sb.state() == worker.VMPaused {
		if rerr := w.resume(context.WithoutCancel(ctx), sb); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	if sb.state() != worker.VMPaused || st == worker.VMPaused {
		sb.clearTransient()
	}
	paused := time.Since(stopped)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return worker.CheckpointStatus{}, err
	}
	meta := checkpointMeta{ID: checkpointID, SandboxID: sandboxID, Spec: sb.spec, CreatedAt: time.Now().UTC(), Paused: paused}
	meta.Spec.FromCheckpoint = ""
	err = snapfile.WriteJSON(filepath.Join(tmp, checkpointMetaFile), meta)
	if err == nil {
		err = snapfile.Seal(ctx, tmp, manifest{CreatedAt: meta.CreatedAt, VCPUs: sb.spec.VCPUs, MemoryMiB: sb.spec.MemoryMiB, DeviceSet: sb.devices})
	}
	if err == nil {
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return worker.CheckpointStatus{}, snapfile.DiskError("seal checkpoint", err)
	}
	faultinject.Point("checkpoint.sealed")
	status := w.checkpointStatus(meta)
	if err := w.uploadCheckpoint(ctx, status, dir); err != nil {
		w.ckMu.Lock()
		_ = os.RemoveAll(dir)
		w.ckMu.Unlock()
		return worker.CheckpointStatus{}, err
	}
	w.log.Info("checkpoint taken", "sandbox", sandboxID, "checkpoint", checkpointID, "paused", paused.Round(time.Microsecond))
	return status, nil
}

// DeleteCheckpoint implements worker.Lifecycle.
func (w *Worker) DeleteCheckpoint(ctx context.Context, checkpointID string) error {
	if !validID(checkpointID) {
		return fmt.Errorf("checkpoint id %q: %w", checkpointID, errdefs.ErrInvalidArgument)
	}
	w.ckMu.Lock()
	defer w.ckMu.Unlock()
	if err := os.RemoveAll(w.checkpointDir(checkpointID)); err != nil {
		return fmt.Errorf("remove checkpoint: %w: %v", errdefs.ErrInternal, err)
	}
	return w.deleteCheckpointObject(ctx, checkpointID)
}

// Checkpoints implements worker.Lifecycle.
func (w *Worker) Checkpoints(ctx context.Context) ([]worker.CheckpointStatus, error) {
	entries, err := os.ReadDir(w.checkpointsDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w: %v", errdefs.ErrInternal, err)
	}
	var out []worker.CheckpointStatus
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if m, err := w.loadCheckpoint(e.Name()); err == nil {
			out = append(out, w.checkpointStatus(m))
		}
	}
	return out, nil
}

// branch gives a new sandbox the checkpoint's state (CreateSandbox with
// FromCheckpoint; the caller configures the agent).
func (w *Worker) branch(ctx context.Context, sb *sandbox, ck checkpointSource) error {
	w.ckMu.RLock()
	defer w.ckMu.RUnlock()
	dir := ck.dir
	m, err := snapfile.Verify(ctx, dir)
	if err != nil {
		return err
	}
	return w.restoreInto(ctx, sb, dir, m)
}

// RestoreCheckpoint implements worker.Lifecycle.
func (w *Worker) RestoreCheckpoint(ctx context.Context, sandboxID, checkpointID string) (worker.SandboxStatus, error) {
	src, err := w.openCheckpoint(ctx, checkpointID)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	defer src.release()
	ck := src.meta
	sb, done, err := w.lifecycle(sandboxID)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	defer done()
	switch st := sb.state(); st {
	case worker.VMRunning, worker.VMPaused, worker.VMSuspended:
	default:
		return worker.SandboxStatus{}, wrongState(st, "only a running, paused or suspended sandbox can be restored")
	}
	w.ckMu.RLock()
	defer w.ckMu.RUnlock()
	dir := src.dir
	m, err := snapfile.Verify(ctx, dir)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	// From here the old state is given up.
	w.abandonVM(ctx, sb, true)
	faultinject.Point("restore.abandoned")
	sb.mu.Lock()
	sb.suspended = false
	sb.spec.Template, sb.spec.VCPUs, sb.spec.MemoryMiB, sb.spec.DiskMiB =
		ck.Spec.Template, ck.Spec.VCPUs, ck.Spec.MemoryMiB, ck.Spec.DiskMiB
	spec := sb.spec
	sb.mu.Unlock()
	if err := os.RemoveAll(sb.path(suspendDir)); err != nil {
		return worker.SandboxStatus{}, fmt.Errorf("remove suspend snapshot: %w: %v", errdefs.ErrInternal, err)
	}
	if err := snapfile.WriteJSON(sb.path(specFile), spec); err != nil {
		return worker.SandboxStatus{}, fmt.Errorf("record spec: %w: %v", errdefs.ErrInternal, err)
	}
	if err := w.restoreInto(ctx, sb, dir, m); err != nil {
		return worker.SandboxStatus{}, fmt.Errorf("restore checkpoint (the sandbox has no VM now): %w", err)
	}
	faultinject.Point("restore.restored")
	if err := w.configure(ctx, sb.agent, spec); err != nil {
		return worker.SandboxStatus{}, fmt.Errorf("configure agent after restore: %w", err)
	}
	w.log.Info("sandbox restored to checkpoint", "sandbox", sandboxID, "checkpoint", checkpointID)
	return sb.status(), nil
}
