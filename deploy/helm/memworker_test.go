package helm

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// memWorker is a worker.Worker that keeps sandboxes as records, for
// running the node code without VMs (the node code under test talks to
// Kubernetes; what a VM does is the local worker's suite's business).
type memWorker struct {
	mu    sync.Mutex
	vms   map[string]worker.SandboxStatus
	exits chan worker.Exit
	snaps *memSnapshots // where a suspend "uploads" its snapshot
}

func newMemWorker(snaps *memSnapshots) *memWorker {
	return &memWorker{vms: map[string]worker.SandboxStatus{}, exits: make(chan worker.Exit), snaps: snaps}
}

// memSnapshots is placement.SnapshotStore over the records a memWorker's
// suspends leave: the spec as meta, as a worker's upload stores it.
type memSnapshots struct {
	mu    sync.Mutex
	metas map[string]json.RawMessage
	times map[string]time.Time
}

func newMemSnapshots() *memSnapshots {
	return &memSnapshots{metas: map[string]json.RawMessage{}, times: map[string]time.Time{}}
}

func (s *memSnapshots) put(name string, spec worker.SandboxSpec, at time.Time) error {
	meta, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.metas[name], s.times[name] = meta, at
	return nil
}

func (s *memSnapshots) Meta(_ context.Context, name string) (json.RawMessage, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	meta, ok := s.metas[name]
	if !ok {
		return nil, time.Time{}, errdefs.New(errdefs.ErrNotFound, "no snapshot %s", name)
	}
	return meta, s.times[name], nil
}

func (s *memSnapshots) List(_ context.Context, prefix string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name := range s.metas {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	return out, nil
}

func (s *memSnapshots) Delete(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.metas, name)
	delete(s.times, name)
	return nil
}

func (w *memWorker) has(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.vms[id]
	return ok
}

func (w *memWorker) Ready(context.Context) error { return nil }

func (w *memWorker) CreateSandbox(_ context.Context, spec worker.SandboxSpec) (worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.vms[spec.ID]; ok {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrConflict, "sandbox %s exists", spec.ID)
	}
	st := worker.SandboxStatus{ID: spec.ID, State: worker.VMRunning, BootedAt: time.Now(), Spec: spec}
	w.vms[spec.ID] = st
	return st, nil
}

func (w *memWorker) DeleteSandbox(_ context.Context, id string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.vms, id)
	return nil
}

func (w *memWorker) Sandbox(_ context.Context, id string) (worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.vms[id]
	if !ok {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	return st, nil
}

func (w *memWorker) Sandboxes(context.Context) ([]worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]worker.SandboxStatus, 0, len(w.vms))
	for _, st := range w.vms {
		out = append(out, st)
	}
	return out, nil
}

var errNoLifecycle = errdefs.New(errdefs.ErrFailedPrecondition, "this test's worker keeps records only")

func (w *memWorker) PauseSandbox(context.Context, string) (worker.SandboxStatus, error) {
	return worker.SandboxStatus{}, errNoLifecycle
}
func (w *memWorker) ResumeSandbox(context.Context, string) (worker.SandboxStatus, error) {
	return worker.SandboxStatus{}, errNoLifecycle
}

// SuspendSandbox records the sandbox suspended and its snapshot stored.
func (w *memWorker) SuspendSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.vms[id]
	if !ok {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	if err := w.snaps.put(worker.SuspendSnapshot(id), st.Spec, time.Now()); err != nil {
		return worker.SandboxStatus{}, err
	}
	st.State = worker.VMSuspended
	w.vms[id] = st
	return st, nil
}

func (w *memWorker) WakeSandbox(_ context.Context, id string) (worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.vms[id]
	if !ok {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	st.State = worker.VMRunning
	w.vms[id] = st
	return st, nil
}
func (w *memWorker) Checkpoint(context.Context, string, string) (worker.CheckpointStatus, error) {
	return worker.CheckpointStatus{}, errNoLifecycle
}
func (w *memWorker) DeleteCheckpoint(context.Context, string) error { return nil }
func (w *memWorker) Checkpoints(context.Context) ([]worker.CheckpointStatus, error) {
	return nil, nil
}
func (w *memWorker) RestoreCheckpoint(context.Context, string, string) (worker.SandboxStatus, error) {
	return worker.SandboxStatus{}, errNoLifecycle
}
func (w *memWorker) PrepareTemplate(context.Context, worker.SandboxSpec) error { return nil }
func (w *memWorker) ForgetTemplate(context.Context, string) error              { return nil }
func (w *memWorker) Agent(context.Context, string) (worker.Guest, error) {
	return nil, errdefs.New(errdefs.ErrUnavailable, "this test's worker runs no guests")
}
func (w *memWorker) SetNetworkPolicy(ctx context.Context, id string, _ json.RawMessage) error {
	_, err := w.Sandbox(ctx, id)
	return err
}
func (w *memWorker) NetworkLog(context.Context, string) ([]worker.NetworkRecord, error) {
	return nil, nil
}
func (w *memWorker) Exits() <-chan worker.Exit { return w.exits }
func (w *memWorker) Close() error              { return nil }
