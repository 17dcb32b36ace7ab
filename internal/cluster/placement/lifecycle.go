package placement

import (
	"context"

	"github.com/space-sandbox/space/internal/worker"
)

// The lifecycle of one sandbox is its worker's: each call goes there.

func (p *Placement) PauseSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	w, err := p.owner(id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return w.PauseSandbox(ctx, id)
}

func (p *Placement) ResumeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	w, err := p.owner(id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return w.ResumeSandbox(ctx, id)
}

// SuspendSandbox and WakeSandbox are in suspend.go: a suspended sandbox
// has no Pod.

func (p *Placement) Checkpoint(ctx context.Context, sandboxID, checkpointID string) (worker.CheckpointStatus, error) {
	w, err := p.owner(sandboxID)
	if err != nil {
		return worker.CheckpointStatus{}, err
	}
	return w.Checkpoint(ctx, sandboxID, checkpointID)
}

func (p *Placement) RestoreCheckpoint(ctx context.Context, sandboxID, checkpointID string) (worker.SandboxStatus, error) {
	w, err := p.owner(sandboxID)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return w.RestoreCheckpoint(ctx, sandboxID, checkpointID)
}

// PrepareTemplate makes the template's ready snapshot on every Ready
// worker: a create may land on any of them.
func (p *Placement) PrepareTemplate(ctx context.Context, spec worker.SandboxSpec) error {
	return p.eachWorker(func(w worker.Worker) error { return w.PrepareTemplate(ctx, spec) })
}

// ForgetTemplate removes the template's ready snapshots from every Ready
// worker.
func (p *Placement) ForgetTemplate(ctx context.Context, ref string) error {
	return p.eachWorker(func(w worker.Worker) error { return w.ForgetTemplate(ctx, ref) })
}
