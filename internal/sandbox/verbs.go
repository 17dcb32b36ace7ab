package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// The verbs as the edge asks for them: each checks the state table, and
// records its sandbox, checkpoint or operation in one transaction.

// Create stores sb (state creating) and submits its create operation.
func (s *Service) Create(ctx context.Context, sb *store.Sandbox) (*store.Operation, error) {
	return s.ops.Submit(ctx, &store.Operation{TenantID: sb.TenantID, Type: store.OpCreate, Target: sb.ID},
		func(ctx context.Context, tx store.Store) error { return tx.CreateSandbox(ctx, sb) })
}

// Branch stores sb (state creating) and submits the branch operation that
// boots it from checkpoint ck.
func (s *Service) Branch(ctx context.Context, sb *store.Sandbox, ck *store.Checkpoint) (*store.Operation, error) {
	raw, _ := json.Marshal(CheckpointParams{Checkpoint: ck.ID})
	return s.ops.Submit(ctx, &store.Operation{TenantID: sb.TenantID, Type: store.OpBranch, Target: sb.ID, Params: raw},
		func(ctx context.Context, tx store.Store) error { return tx.CreateSandbox(ctx, sb) })
}

// Checkpoint submits a checkpoint of sb named name (may be empty). The
// checkpoint's parent is the checkpoint sb was last branched from or
// restored to.
func (s *Service) Checkpoint(ctx context.Context, sb *store.Sandbox, name string) (*store.Checkpoint, *store.Operation, error) {
	if err := checkpointRule.Check(sb); err != nil {
		return nil, nil, err
	}
	parent, err := s.Origin(ctx, sb.ID)
	if err != nil {
		return nil, nil, err
	}
	ck := &store.Checkpoint{ID: store.NewID(store.PrefixCheckpoint), TenantID: sb.TenantID, SandboxID: sb.ID,
		Name: name, Parent: parent, State: store.CheckpointCreating, Template: sb.Template,
		TemplateDigest: sb.TemplateDigest, VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB, DiskMiB: sb.DiskMiB,
		Worker: sb.Worker, CreatedAt: time.Now().UTC()}
	raw, _ := json.Marshal(CheckpointParams{Checkpoint: ck.ID})
	op, err := s.ops.Submit(ctx, &store.Operation{TenantID: sb.TenantID, Type: store.OpCheckpoint, Target: sb.ID, Params: raw},
		func(ctx context.Context, tx store.Store) error {
			cur, err := tx.GetSandbox(ctx, sb.TenantID, sb.ID)
			if err != nil {
				return err
			}
			if err := checkpointRule.Check(cur); err != nil {
				return err
			}
			return tx.CreateCheckpoint(ctx, ck)
		})
	if err != nil {
		return nil, nil, err
	}
	return ck, op, nil
}

// ErrNotInLineage is the invalid restore of a checkpoint that is neither of
// the sandbox nor of one it was branched from.
var ErrNotInLineage = fmt.Errorf("checkpoint outside the sandbox's lineage: %w", errdefs.ErrInvalidArgument)

// Restore submits the restore of sb to checkpoint ck (ready). The sandbox
// takes the checkpoint's size: what it grows by must fit the tenant's
// quota, checked as the restore is accepted.
func (s *Service) Restore(ctx context.Context, sb *store.Sandbox, ck *store.Checkpoint) (*store.Operation, error) {
	ok, err := s.InLineage(ctx, sb.ID, ck)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrNotInLineage
	}
	growth := func(ctx context.Context, tx store.Store, cur *store.Sandbox) error {
		extra := store.Usage{VCPUs: max(0, ck.VCPUs-cur.VCPUs), MemoryMiB: max(0, ck.MemoryMiB-cur.MemoryMiB)}
		if extra == (store.Usage{}) {
			return nil
		}
		return tx.CheckQuota(ctx, cur.TenantID, extra)
	}
	return s.SubmitOnChecked(ctx, sb, store.OpRestore, RuleOf(Restore).From, CheckpointParams{Checkpoint: ck.ID}, growth)
}

// Keep extends sb's time to live to seconds from now (1 second to
// MaxTimeoutSeconds).
func (s *Service) Keep(ctx context.Context, sb *store.Sandbox, seconds int) (*store.Sandbox, error) {
	if err := ValidKeep(seconds); err != nil {
		return nil, err
	}
	return s.store.TransitionSandbox(ctx, sb.TenantID, sb.ID, RuleOf(Keep).From, "", func(sb *store.Sandbox) error {
		exp := time.Now().UTC().Add(time.Duration(seconds) * time.Second)
		sb.ExpiresAt = &exp
		sb.TimeoutSeconds = seconds
		return nil
	})
}

// SetNetwork replaces sb's egress policy on its worker, then in its record.
func (s *Service) SetNetwork(ctx context.Context, sb *store.Sandbox, policy json.RawMessage) (*store.Sandbox, error) {
	r := RuleOf(Network)
	if err := r.Check(sb); err != nil {
		return nil, err
	}
	if err := s.worker.SetNetworkPolicy(ctx, sb.ID, policy); err != nil {
		return nil, err
	}
	return s.store.TransitionSandbox(ctx, sb.TenantID, sb.ID, r.From, "", func(sb *store.Sandbox) error {
		sb.Network = policy
		return nil
	})
}
