package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// With Config.Snapshots set, checkpoints live in object storage (each
// worker uploads the checkpoints it takes under
// worker.CheckpointSnapshot, its CheckpointStatus as the meta): they are
// listed and deleted there, and a branch Pod is placed by the scheduler
// like any create, since every worker can fetch the checkpoint. Without
// it a checkpoint is only on the worker that took it: listing and
// deletion go to every Ready worker, and a branch is pinned to the node
// holding its checkpoint.

// branchOf completes the spec of a branch of spec.FromCheckpoint with the
// checkpoint's template and size (what its Pod requests), and says which
// node the Pod must be pinned to ("" when the scheduler chooses).
// ErrNotFound when there is no such checkpoint.
func (p *Placement) branchOf(ctx context.Context, spec worker.SandboxSpec) (worker.SandboxSpec, string, error) {
	if p.cfg.Snapshots == nil {
		node, err := p.holderOf(ctx, spec.FromCheckpoint)
		return spec, node, err
	}
	ck, err := p.storedCheckpoint(ctx, spec.FromCheckpoint)
	if err != nil {
		return spec, "", err
	}
	spec.Template, spec.VCPUs, spec.MemoryMiB, spec.DiskMiB = ck.Spec.Template, ck.Spec.VCPUs, ck.Spec.MemoryMiB, ck.Spec.DiskMiB
	return spec, "", nil
}

// storedCheckpoint reads a checkpoint's status from the object store.
func (p *Placement) storedCheckpoint(ctx context.Context, id string) (worker.CheckpointStatus, error) {
	var ck worker.CheckpointStatus
	meta, _, err := p.cfg.Snapshots.Meta(ctx, worker.CheckpointSnapshot(id))
	if errors.Is(err, errdefs.ErrNotFound) {
		return ck, errdefs.New(errdefs.ErrNotFound, "checkpoint %s not found", id).WithCause(err)
	}
	if err != nil {
		return ck, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if err := json.Unmarshal(meta, &ck); err != nil || ck.ID != id {
		return ck, errdefs.New(errdefs.ErrDataLoss, "checkpoint %s: its stored description is damaged", id).
			WithCause(fmt.Errorf("meta %q: %v", meta, err))
	}
	return ck, nil
}

// DeleteCheckpoint removes the checkpoint: from the object store (when
// configured), and from every Ready worker, which drops its local copy.
func (p *Placement) DeleteCheckpoint(ctx context.Context, checkpointID string) error {
	if p.cfg.Snapshots != nil {
		if err := p.cfg.Snapshots.Delete(ctx, worker.CheckpointSnapshot(checkpointID)); err != nil {
			return fmt.Errorf("delete checkpoint %s: %w", checkpointID, err)
		}
	}
	return p.eachWorker(func(w worker.Worker) error { return w.DeleteCheckpoint(ctx, checkpointID) })
}

// Checkpoints lists the checkpoints in the object store (when configured),
// else those of every Ready worker.
func (p *Placement) Checkpoints(ctx context.Context) ([]worker.CheckpointStatus, error) {
	if p.cfg.Snapshots == nil {
		var out []worker.CheckpointStatus
		err := p.eachWorker(func(w worker.Worker) error {
			cks, err := w.Checkpoints(ctx)
			out = append(out, cks...)
			return err
		})
		return out, err
	}
	prefix := worker.CheckpointSnapshot("")
	names, err := p.cfg.Snapshots.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	out := make([]worker.CheckpointStatus, 0, len(names))
	for _, name := range names {
		ck, err := p.storedCheckpoint(ctx, strings.TrimPrefix(name, prefix))
		if errors.Is(err, errdefs.ErrNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ck)
	}
	return out, nil
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
