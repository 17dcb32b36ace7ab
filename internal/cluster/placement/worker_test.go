package placement_test

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// testWorker is a small in-memory worker.Worker: what is under test here
// is Kubernetes placing Pods and the node agent running them, not a VM.
type testWorker struct {
	mu        sync.Mutex
	vms       map[string]*worker.SandboxStatus
	creates   map[string]int
	createErr error
	notReady  error
	ckpts     []worker.CheckpointStatus // what Checkpoints lists
	exits     chan worker.Exit
	// roam, when set, is the object store suspends go to and wakes come
	// from (roam_test.go).
	roam *roamStore
	// beforeSuspend and onDelete, when set, run first in SuspendSandbox
	// (an error fails it) and DeleteSandbox (drain_test.go).
	beforeSuspend func(ctx context.Context, id string) error
	onDelete      func(id string)
}

func newTestWorker() *testWorker {
	return &testWorker{vms: map[string]*worker.SandboxStatus{}, creates: map[string]int{}, exits: make(chan worker.Exit)}
}

func (w *testWorker) Ready(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.notReady
}

func (w *testWorker) setNotReady(err error) {
	w.mu.Lock()
	w.notReady = err
	w.mu.Unlock()
}

func (w *testWorker) CreateSandbox(ctx context.Context, spec worker.SandboxSpec) (worker.SandboxStatus, error) {
	if spec.FromSnapshot != "" {
		return w.createFromStore(ctx, spec)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.createErr != nil {
		return worker.SandboxStatus{}, w.createErr
	}
	if _, ok := w.vms[spec.ID]; ok {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrConflict, "sandbox %s exists", spec.ID)
	}
	w.creates[spec.ID]++
	st := &worker.SandboxStatus{ID: spec.ID, State: worker.VMRunning, BootedAt: time.Now(), Spec: spec}
	w.vms[spec.ID] = st
	return *st, nil
}

func (w *testWorker) DeleteSandbox(ctx context.Context, id string) error {
	w.mu.Lock()
	onDelete := w.onDelete
	w.mu.Unlock()
	if onDelete != nil {
		onDelete(id)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.vms, id)
	return nil
}

func (w *testWorker) Sandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.vms[id]
	if !ok {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	return *st, nil
}

func (w *testWorker) Sandboxes(ctx context.Context) ([]worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []worker.SandboxStatus
	for _, st := range w.vms {
		out = append(out, *st)
	}
	return out, nil
}

// has reports whether the worker holds the sandbox and how often it was
// created here.
func (w *testWorker) has(id string) (bool, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.vms[id]
	return ok, w.creates[id]
}

func (w *testWorker) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.vms)
}

// stopVM makes a VM stop on its own, with what the worker knows of why.
func (w *testWorker) stopVM(id, lost string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st, ok := w.vms[id]; ok {
		st.State, st.Lost = worker.VMStopped, lost
	}
}

func (w *testWorker) move(id string, to worker.VMState) (worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.vms[id]
	if !ok {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	st.State = to
	return *st, nil
}

func (w *testWorker) PauseSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	return w.move(id, worker.VMPaused)
}
func (w *testWorker) ResumeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	return w.move(id, worker.VMRunning)
}
func (w *testWorker) SuspendSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	w.mu.Lock()
	before := w.beforeSuspend
	w.mu.Unlock()
	if before != nil {
		if err := before(ctx, id); err != nil {
			return worker.SandboxStatus{}, err
		}
	}
	if w.roam != nil {
		return w.suspendToStore(ctx, id)
	}
	return w.move(id, worker.VMSuspended)
}
func (w *testWorker) WakeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	return w.move(id, worker.VMRunning)
}

var errNoCheckpoints = errdefs.New(errdefs.ErrFailedPrecondition, "the test worker keeps no checkpoints")

func (w *testWorker) Checkpoint(ctx context.Context, sandboxID, checkpointID string) (worker.CheckpointStatus, error) {
	return worker.CheckpointStatus{}, errNoCheckpoints
}
func (w *testWorker) DeleteCheckpoint(ctx context.Context, checkpointID string) error { return nil }
func (w *testWorker) Checkpoints(ctx context.Context) ([]worker.CheckpointStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]worker.CheckpointStatus(nil), w.ckpts...), nil
}
func (w *testWorker) RestoreCheckpoint(ctx context.Context, sandboxID, checkpointID string) (worker.SandboxStatus, error) {
	return worker.SandboxStatus{}, errNoCheckpoints
}
func (w *testWorker) PrepareTemplate(ctx context.Context, spec worker.SandboxSpec) error { return nil }
func (w *testWorker) ForgetTemplate(ctx context.Context, ref string) error               { return nil }
func (w *testWorker) Agent(ctx context.Context, id string) (worker.Guest, error) {
	return nil, errdefs.New(errdefs.ErrUnavailable, "the test worker runs no guests")
}
func (w *testWorker) SetNetworkPolicy(ctx context.Context, id string, policy json.RawMessage) error {
	_, err := w.Sandbox(ctx, id)
	return err
}
func (w *testWorker) NetworkLog(ctx context.Context, id string) ([]worker.NetworkRecord, error) {
	return nil, nil
}
func (w *testWorker) Exits() <-chan worker.Exit { return w.exits }
func (w *testWorker) Close() error              { return nil }
