package sandbox

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// CheckpointParams is the Params of restore and branch operations.
type CheckpointParams struct {
	Checkpoint string `json:"checkpoint"`
}

// checkpointRule are the states a checkpoint can be taken in.
var checkpointRule = RuleOf(Checkpoint)

// maxAncestry bounds the walk up a sandbox's branch lineage.
const maxAncestry = 32

// origin returns the checkpoint a sandbox was last branched from or
// restored to ("" for none): the newest succeeded branch or restore
// operation on it says.
func (s *Service) Origin(ctx context.Context, sandboxID string) (string, error) {
	for op, err := range store.All(ctx, s.store.ListOperations, store.OperationFilter{TenantID: store.AnyTenant, Target: sandboxID}) {
		if err != nil {
			return "", err
		}
		if (op.Type == store.OpBranch || op.Type == store.OpRestore) && op.State == store.OpSucceeded {
			var p CheckpointParams
			if json.Unmarshal(op.Params, &p) == nil {
				return p.Checkpoint, nil
			}
		}
	}
	return "", nil
}

// InLineage reports whether ck was taken of sandboxID or of a sandbox it
// descends from by branches.
func (s *Service) InLineage(ctx context.Context, sandboxID string, ck *store.Checkpoint) (bool, error) {
	id := sandboxID
	for range maxAncestry {
		if ck.SandboxID == id {
			return true, nil
		}
		from, err := s.Origin(ctx, id)
		if err != nil || from == "" {
			return false, err
		}
		parent, err := s.store.GetCheckpoint(ctx, store.AnyTenant, from)
		if errdefs.ClassOf(err) == errdefs.ErrNotFound {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		id = parent.SandboxID
	}
	return false, nil
}

// runCheckpoint is the "checkpoint" operation: the worker keeps the
// sandbox's state under the checkpoint's id; the sandbox keeps its state.
func (s *Service) runCheckpoint(ctx context.Context, op *store.Operation, report operation.ProgressFunc) (any, error) {
	var p CheckpointParams
	if err := json.Unmarshal(op.Params, &p); err != nil || p.Checkpoint == "" {
		return nil, fmt.Errorf("checkpoint operation %s without a checkpoint: %w", op.ID, errdefs.ErrInternal)
	}
	log := s.logger.With("op", op.ID, "sandbox", op.Target, "checkpoint", p.Checkpoint)
	fail := func(err error) (any, error) {
		if _, uerr := s.store.UpdateCheckpoint(context.WithoutCancel(ctx), p.Checkpoint, []store.CheckpointState{store.CheckpointCreating},
			func(c *store.Checkpoint) error { c.State = store.CheckpointFailed; return nil }); uerr != nil {
			log.Error("mark checkpoint failed", "err", uerr)
		}
		return nil, err
	}
	sb, err := s.store.GetSandbox(ctx, store.AnyTenant, op.Target)
	if err != nil {
		return fail(err)
	}
	if err := checkpointRule.Check(sb); err != nil {
		return fail(err)
	}
	report(ctx, checkpointRule.Step, 30)
	st, err := s.worker.Checkpoint(ctx, sb.ID, p.Checkpoint)
	if err != nil {
		log.Warn("checkpoint failed", "err", CauseString(err))
		return fail(err)
	}
	ck, err := s.store.UpdateCheckpoint(context.WithoutCancel(ctx), p.Checkpoint, []store.CheckpointState{store.CheckpointCreating},
		func(c *store.Checkpoint) error {
			c.State, c.SizeBytes = store.CheckpointReady, st.SizeBytes
			return nil
		})
	if err != nil {
		// The record went away (deleted while being made): drop the files.
		if derr := s.worker.DeleteCheckpoint(context.WithoutCancel(ctx), p.Checkpoint); derr != nil {
			log.Error("drop checkpoint files", "err", derr)
		}
		return nil, err
	}
	log.Info("checkpoint ready", "paused", st.Paused, "size_bytes", st.SizeBytes)
	return ck, nil
}

// restoreOnWorker is the worker's part of a restore; then the commands
// follow the restored guest (syncCommands): those it does not know end
// "lost", those it knows run or have ended as its agent says, and processes
// it inherited from the checkpoint's sandbox become commands of this one.
func (s *Service) restoreOnWorker(ctx context.Context, op *store.Operation) (worker.SandboxStatus, error) {
	var p CheckpointParams
	if err := json.Unmarshal(op.Params, &p); err != nil || p.Checkpoint == "" {
		return worker.SandboxStatus{}, fmt.Errorf("restore operation %s without a checkpoint: %w", op.ID, errdefs.ErrInternal)
	}
	ck, err := s.store.GetCheckpoint(ctx, store.AnyTenant, p.Checkpoint)
	if err != nil {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrNotFound, "checkpoint %s no longer exists", p.Checkpoint).WithCause(err)
	}
	st, err := s.worker.RestoreCheckpoint(ctx, op.Target, p.Checkpoint)
	if err != nil {
		return st, err
	}
	s.syncCommands(ctx, op.Target, ck.SandboxID)
	return st, nil
}

// branchSource is the checkpoint a branch operation starts from.
func branchSource(op *store.Operation) string {
	var p CheckpointParams
	_ = json.Unmarshal(op.Params, &p) // written by createBranch
	return p.Checkpoint
}

// GetCheckpoint is tenant's checkpoint id (not found for another
// tenant's).
func (s *Service) GetCheckpoint(ctx context.Context, tenant, id string) (*store.Checkpoint, error) {
	return s.store.GetCheckpoint(ctx, tenant, id)
}

// ListCheckpoints is a page of tenant's checkpoints of sandboxID.
func (s *Service) ListCheckpoints(ctx context.Context, tenant, sandboxID string, pr store.PageRequest) (store.Page[*store.Checkpoint], error) {
	return s.store.ListCheckpoints(ctx, store.CheckpointFilter{TenantID: tenant, SandboxID: sandboxID, PageRequest: pr})
}

// DeleteCheckpoint removes a checkpoint's files (on the worker) and then
// its record at once. Sandboxes branched from or restored to it keep
// working: they own their copies. A checkpoint still being made is
// conflict (details.state).
func (s *Service) DeleteCheckpoint(ctx context.Context, ck *store.Checkpoint) error {
	if ck.State == store.CheckpointCreating {
		return errdefs.New(errdefs.ErrConflict, "checkpoint %s is %s", ck.ID, ck.State).
			WithDetails(map[string]any{"state": string(ck.State)})
	}
	if err := s.worker.DeleteCheckpoint(ctx, ck.ID); err != nil {
		return err
	}
	if err := s.store.DeleteCheckpoint(ctx, ck.TenantID, ck.ID); err != nil && errdefs.ClassOf(err) != errdefs.ErrNotFound {
		return err
	}
	return nil
}
