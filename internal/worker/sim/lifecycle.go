package sim

import (
	"context"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

func wrongState(state worker.VMState, want string) error {
	return errdefs.New(errdefs.ErrConflict, "sandbox is %s; %s", state, want).
		WithDetails(map[string]any{"state": string(state)})
}

// transition runs one lifecycle verb on sandbox id: under its op lock,
// decide says from the current state whether the verb has nothing to do
// (done), is refused (err), or goes on; then the verb's latency is spent
// and apply (under sb.mu) makes the change. A failed or cancelled call
// leaves the sandbox as it was.
func (w *Worker) transition(ctx context.Context, id string, verb Verb,
	decide func(worker.VMState) (done bool, err error), apply func(sb *sandbox)) (worker.SandboxStatus, error) {
	sb, err := w.lookup(id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	sb.mu.Lock()
	state := sb.state
	sb.mu.Unlock()
	if state == worker.VMStopped {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	done, err := decide(state)
	if err != nil || done {
		return sb.status(), err
	}
	if err := w.spend(ctx, verb); err != nil {
		return worker.SandboxStatus{}, err
	}
	sb.mu.Lock()
	apply(sb)
	sb.mu.Unlock()
	return sb.status(), nil
}

func (w *Worker) PauseSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	return w.transition(ctx, id, VerbPause, func(s worker.VMState) (bool, error) {
		switch s {
		case worker.VMPaused:
			return true, nil
		case worker.VMRunning:
			return false, nil
		}
		return false, wrongState(s, "only a running sandbox can be paused")
	}, func(sb *sandbox) { sb.state = worker.VMPaused })
}

func (w *Worker) ResumeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	return w.transition(ctx, id, VerbResume, func(s worker.VMState) (bool, error) {
		switch s {
		case worker.VMRunning:
			return true, nil
		case worker.VMPaused:
			return false, nil
		}
		return false, wrongState(s, "only a paused sandbox can be resumed")
	}, func(sb *sandbox) { sb.state = worker.VMRunning })
}

func (w *Worker) SuspendSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	return w.transition(ctx, id, VerbSuspend, func(s worker.VMState) (bool, error) {
		switch s {
		case worker.VMSuspended:
			return true, nil
		case worker.VMRunning, worker.VMPaused:
			return false, nil
		}
		return false, wrongState(s, "only a running or paused sandbox can be suspended")
	}, func(sb *sandbox) {
		frozen := sb.guest.clone(true)
		sb.guest.stop()
		sb.guest, sb.state = frozen, worker.VMSuspended
	})
}

func (w *Worker) WakeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	var from worker.VMState
	return w.transition(ctx, id, VerbWake, func(s worker.VMState) (bool, error) {
		from = s
		switch s {
		case worker.VMRunning:
			return true, nil
		case worker.VMPaused, worker.VMSuspended:
			return false, nil
		}
		return false, wrongState(s, "only a paused or suspended sandbox can be woken")
	}, func(sb *sandbox) {
		if from == worker.VMSuspended {
			sb.guest, sb.restored, sb.booted = sb.guest.clone(false), true, time.Now()
		}
		sb.state = worker.VMRunning
	})
}

func (w *Worker) Checkpoint(ctx context.Context, sandboxID, checkpointID string) (worker.CheckpointStatus, error) {
	if checkpointID == "" {
		return worker.CheckpointStatus{}, errdefs.New(errdefs.ErrInvalidArgument, "checkpoint id is empty")
	}
	var ck *checkpoint
	_, err := w.transition(ctx, sandboxID, VerbCheckpoint, func(s worker.VMState) (bool, error) {
		if s != worker.VMRunning && s != worker.VMPaused {
			return false, wrongState(s, "only a running or paused sandbox can be checkpointed")
		}
		w.mu.Lock()
		_, dup := w.ckpts[checkpointID]
		w.mu.Unlock()
		if dup {
			return false, errdefs.New(errdefs.ErrConflict, "checkpoint %s exists", checkpointID)
		}
		return false, nil
	}, func(sb *sandbox) {
		g := sb.guest.clone(true)
		ck = &checkpoint{guest: g, status: worker.CheckpointStatus{ID: checkpointID, SandboxID: sandboxID, Spec: sb.spec,
			CreatedAt: time.Now(), SizeBytes: g.usedBytes() + int64(sb.spec.MemoryMiB)<<20}}
	})
	if err != nil {
		return worker.CheckpointStatus{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.ckpts[checkpointID]; dup { // taken meanwhile by another sandbox's call
		return worker.CheckpointStatus{}, errdefs.New(errdefs.ErrConflict, "checkpoint %s exists", checkpointID)
	}
	w.ckpts[checkpointID] = ck
	return ck.status, nil
}

// DeleteCheckpoint removes the checkpoint; branches and restores copy
// its state under the worker's lock, so none is reading it after.
func (w *Worker) DeleteCheckpoint(ctx context.Context, checkpointID string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.ckpts, checkpointID)
	return nil
}

func (w *Worker) Checkpoints(ctx context.Context) ([]worker.CheckpointStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]worker.CheckpointStatus, 0, len(w.ckpts))
	for _, ck := range w.ckpts {
		out = append(out, ck.status)
	}
	return out, nil
}

func (w *Worker) RestoreCheckpoint(ctx context.Context, sandboxID, checkpointID string) (worker.SandboxStatus, error) {
	var from *guestState
	return w.transition(ctx, sandboxID, VerbRestore, func(s worker.VMState) (bool, error) {
		w.mu.Lock()
		ck := w.ckpts[checkpointID]
		w.mu.Unlock()
		if ck == nil {
			return false, errdefs.New(errdefs.ErrNotFound, "checkpoint %s not found", checkpointID)
		}
		from = ck.guest
		return false, nil
	}, func(sb *sandbox) {
		sb.guest.stop()
		sb.guest, sb.state, sb.restored, sb.booted = from.clone(false), worker.VMRunning, true, time.Now()
	})
}

// PrepareTemplate has nothing to prepare: simulated creates take the
// create latency whatever the template.
func (w *Worker) PrepareTemplate(ctx context.Context, spec worker.SandboxSpec) error { return nil }

// ForgetTemplate has nothing to forget.
func (w *Worker) ForgetTemplate(ctx context.Context, ref string) error { return nil }
