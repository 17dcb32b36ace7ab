package storecodec

import (
	"slices"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// ChangeSandbox applies one compare-and-set change to sb, the sandbox as read
// (locked) in the writing transaction: it must be in one of from (any state
// when from is empty); mutate may change it but not what identifies it, and
// to, when set, is its new state; then it is what the write stores, as a read
// returns it.
func ChangeSandbox(sb *store.Sandbox, from []store.SandboxState, to store.SandboxState, mutate func(*store.Sandbox) error) error {
	if len(from) > 0 && !slices.Contains(from, sb.State) {
		return StateConflict("sandbox", sb.ID, string(sb.State))
	}
	keepID, keepTenant, keepCreated := sb.ID, sb.TenantID, sb.CreatedAt
	if mutate != nil {
		if err := mutate(sb); err != nil {
			return err
		}
	}
	sb.ID, sb.TenantID, sb.CreatedAt = keepID, keepTenant, keepCreated
	if to != "" {
		sb.State = to
	}
	sb.UpdatedAt = Now()
	NormSandbox(sb)
	return nil
}

// ChangeOperation applies one compare-and-set change to op, the operation as
// read (locked) in the writing transaction: it must be in one of from (any
// state when from is empty); mutate may change it but not what identifies it,
// and to, when set, is its new state; then it is what the write stores, as a
// read returns it.
func ChangeOperation(op *store.Operation, from []store.OperationState, to store.OperationState, mutate func(*store.Operation) error) error {
	if len(from) > 0 && !slices.Contains(from, op.State) {
		return StateConflict("operation", op.ID, string(op.State))
	}
	keepID, keepTenant, keepCreated := op.ID, op.TenantID, op.CreatedAt
	keepOwner, keepExpires := op.LeaseOwner, op.LeaseExpiresAt
	if mutate != nil {
		if err := mutate(op); err != nil {
			return err
		}
	}
	op.ID, op.TenantID, op.CreatedAt = keepID, keepTenant, keepCreated
	op.LeaseOwner, op.LeaseExpiresAt = keepOwner, keepExpires
	if to != "" {
		op.State = to
	}
	op.UpdatedAt = Now()
	if op.State.Terminal() && op.DoneAt == nil {
		d := op.UpdatedAt
		op.DoneAt = &d
	}
	NormOperation(op)
	return nil
}

// ChangeCheckpoint applies one compare-and-set change to ck, the checkpoint as
// read (locked) in the writing transaction: it must be in one of from (any
// state when from is empty); mutate may change it but not what identifies it;
// then it is what the write stores, as a read returns it.
func ChangeCheckpoint(ck *store.Checkpoint, from []store.CheckpointState, mutate func(*store.Checkpoint) error) error {
	if len(from) > 0 && !slices.Contains(from, ck.State) {
		return StateConflict("checkpoint", ck.ID, string(ck.State))
	}
	keepID, keepTenant, keepSandbox, keepCreated := ck.ID, ck.TenantID, ck.SandboxID, ck.CreatedAt
	if mutate != nil {
		if err := mutate(ck); err != nil {
			return err
		}
	}
	ck.ID, ck.TenantID, ck.SandboxID, ck.CreatedAt = keepID, keepTenant, keepSandbox, keepCreated
	return nil
}

// ChangeCommand applies one compare-and-set change to cmd, the command as read
// (locked) in the writing transaction: it must be in one of from (any state
// when from is empty); mutate may change it but not what identifies it; then
// it is what the write stores, as a read returns it.
func ChangeCommand(cmd *store.Command, from []store.CommandState, mutate func(*store.Command) error) error {
	if len(from) > 0 && !slices.Contains(from, cmd.State) {
		return StateConflict("command", cmd.ID, string(cmd.State))
	}
	keepID, keepTenant, keepSandbox, keepProcess, keepCreated := cmd.ID, cmd.TenantID, cmd.SandboxID, cmd.ProcessID, cmd.CreatedAt
	if mutate != nil {
		if err := mutate(cmd); err != nil {
			return err
		}
	}
	cmd.ID, cmd.TenantID, cmd.SandboxID, cmd.ProcessID, cmd.CreatedAt = keepID, keepTenant, keepSandbox, keepProcess, keepCreated
	NormCommand(cmd)
	return nil
}

// CheckQuota fails with ErrResourceExhausted, naming the resource, when
// ask does not fit quota next to used; a zero limit is no limit.
func CheckQuota(q store.Quota, used, ask store.Usage) error {
	for _, l := range []struct {
		resource         string
		limit, used, ask int
	}{
		{"sandboxes", q.MaxSandboxes, used.Sandboxes, ask.Sandboxes},
		{"vcpus", q.MaxVCPUs, used.VCPUs, ask.VCPUs},
		{"memory_mib", q.MaxMemoryMiB, used.MemoryMiB, ask.MemoryMiB},
	} {
		if l.ask > 0 && l.limit > 0 && l.used+l.ask > l.limit {
			return errdefs.New(errdefs.ErrResourceExhausted, "quota exceeded: %s (limit %d, in use %d, requested %d)",
				l.resource, l.limit, l.used, l.ask).WithDetails(map[string]any{
				"resource": l.resource, "limit": l.limit, "used": l.used, "requested": l.ask,
			})
		}
	}
	return nil
}

// ValidLease checks a lease request: an owner and a positive duration.
func ValidLease(owner string, ttl time.Duration) error {
	if owner == "" || ttl <= 0 {
		return errdefs.New(errdefs.ErrInvalidArgument, "a lease needs an owner and a positive duration")
	}
	return nil
}

// LeaseConflict is the error for a claim of op that did not take its lease:
// it is finished, or another control replica holds it.
func LeaseConflict(op *store.Operation) error {
	if op.State.Terminal() {
		return StateConflict("operation", op.ID, string(op.State))
	}
	return errdefs.New(errdefs.ErrConflict, "operation %s is held by another control replica", op.ID).
		WithDetails(map[string]any{"state": string(op.State)})
}

// NotFound is the error for an unknown id (or another tenant's).
func NotFound(kind, id string) error {
	return errdefs.New(errdefs.ErrNotFound, "%s %s not found", kind, id)
}

// StateConflict is the error for a failed compare-and-set on a state.
func StateConflict(kind, id, state string) error {
	return errdefs.New(errdefs.ErrConflict, "%s %s is %s", kind, id, state).
		WithDetails(map[string]any{"state": state})
}

// StartConflict is the error for a start of op by owner that may not run
// it: op is not pending, or its lease is not owner's (nil when it may).
func StartConflict(op *store.Operation, owner string) error {
	if op.State != store.OpPending {
		return StateConflict("operation", op.ID, string(op.State))
	}
	if op.LeaseOwner != owner {
		return LeaseConflict(op)
	}
	return nil
}
