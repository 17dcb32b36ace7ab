package placement

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
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

func (p *Placement) SuspendSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	w, err := p.owner(id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return w.SuspendSandbox(ctx, id)
}

func (p *Placement) WakeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	w, err := p.owner(id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return w.WakeSandbox(ctx, id)
}

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

// Checkpoints live on the worker that took them (until they move to
// object storage): these calls go to every Ready worker, and a branch is
// pinned to the node that holds its checkpoint (holderOf).

// DeleteCheckpoint removes the checkpoint from every Ready worker.
func (p *Placement) DeleteCheckpoint(ctx context.Context, checkpointID string) error {
	return p.eachWorker(func(w worker.Worker) error { return w.DeleteCheckpoint(ctx, checkpointID) })
}

// Checkpoints lists the checkpoints of every Ready worker.
func (p *Placement) Checkpoints(ctx context.Context) ([]worker.CheckpointStatus, error) {
	var out []worker.CheckpointStatus
	err := p.eachWorker(func(w worker.Worker) error {
		cks, err := w.Checkpoints(ctx)
		out = append(out, cks...)
		return err
	})
	return out, err
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

// holderOf is the node whose worker keeps the checkpoint. ErrNotFound when
// no Ready worker does.
func (p *Placement) holderOf(ctx context.Context, checkpointID string) (string, error) {
	nodes, err := p.nodes.List(labels.Everything())
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		if !k8s.NodeReady(n) {
			continue
		}
		w, err := p.workerOn(n.Name)
		if err != nil {
			return "", err
		}
		cks, err := w.Checkpoints(ctx)
		if err != nil {
			return "", fmt.Errorf("node %s: %w", n.Name, err)
		}
		for _, ck := range cks {
			if ck.ID == checkpointID {
				return n.Name, nil
			}
		}
	}
	return "", errdefs.New(errdefs.ErrNotFound, "checkpoint %s is on no worker that is ready", checkpointID)
}
