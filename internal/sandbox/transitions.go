package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// deleteRule are the states a delete starts from.
var deleteRule = RuleOf(Delete)

// SubmitOn submits an operation on sb after checking, in the same
// transaction, that it is in one of from.
func (s *Service) SubmitOn(ctx context.Context, sb *store.Sandbox, typ store.OperationType, from []store.SandboxState, params any) (*store.Operation, error) {
	return s.SubmitOnChecked(ctx, sb, typ, from, params, nil)
}

// SubmitOnChecked is SubmitOn that also runs check (when set) on the
// sandbox's current row in the same transaction.
func (s *Service) SubmitOnChecked(ctx context.Context, sb *store.Sandbox, typ store.OperationType, from []store.SandboxState, params any,
	check func(ctx context.Context, tx store.Store, cur *store.Sandbox) error) (*store.Operation, error) {
	op := &store.Operation{TenantID: sb.TenantID, Type: typ, Target: sb.ID}
	if params != nil {
		raw, err := json.Marshal(params)
		if err != nil {
			return nil, err
		}
		op.Params = raw
	}
	return s.ops.Submit(ctx, op, func(ctx context.Context, tx store.Store) error {
		cur, err := tx.GetSandbox(ctx, sb.TenantID, sb.ID)
		if err != nil {
			return err
		}
		if err := RequireState(cur, from...); err != nil {
			return err
		}
		if check != nil {
			return check(ctx, tx, cur)
		}
		return nil
	})
}

// runTransition is the operation handler of t: it moves the sandbox to
// t.During, lets act do the worker's part, and moves it to t.To; when act fails
// the sandbox takes the state the worker reports (see settle).
func (s *Service) runTransition(t Rule, act func(ctx context.Context, op *store.Operation) (worker.SandboxStatus, error)) operation.Handler {
	return func(ctx context.Context, op *store.Operation, report operation.ProgressFunc) (any, error) {
		log := s.logger.With("op", op.ID, "sandbox", op.Target)
		var before store.SandboxState
		sb, err := s.store.TransitionSandbox(ctx, store.AnyTenant, op.Target, t.From, t.During, func(sb *store.Sandbox) error {
			before = sb.State
			return nil
		})
		if err != nil {
			return nil, err
		}
		s.life.leftRunning(sb.ID)
		report(ctx, t.Step, 20)
		st, werr := act(ctx, op)
		if werr != nil {
			log.Warn("sandbox "+string(op.Type)+" failed", "err", CauseString(werr))
			s.settle(ctx, sb.ID, t, werr, before)
			return nil, werr
		}
		sb, err = s.store.TransitionSandbox(context.WithoutCancel(ctx), store.AnyTenant, sb.ID,
			t.Running(), t.To, func(sb *store.Sandbox) error {
				if t.To == store.SandboxRunning {
					// A woken sandbox starts a fresh idle period.
					sb.LastActivityAt = time.Now().UTC()
					sb.Template, sb.VCPUs, sb.MemoryMiB = orStr(st.Spec.Template, sb.Template), orInt(st.Spec.VCPUs, sb.VCPUs), orInt(st.Spec.MemoryMiB, sb.MemoryMiB)
				}
				return nil
			})
		if err != nil {
			return nil, err
		}
		if t.To == store.SandboxRunning {
			s.life.woke(sb.ID)
		}
		log.Info("sandbox " + string(sb.State))
		return Status{Sandbox: sb, Worker: &st}, nil
	}
}

func orStr(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

func orInt(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// settle moves a sandbox whose lifecycle call failed out of t.During: to
// failed (its VM torn down, commands lost) when the worker no longer has a
// VM for it, to failed with the files kept for inspection on data loss at
// wake, to the state before the call (before) when the worker cannot say
// now (e.g. a wake whose snapshot's object store is down: its worker keeps
// nothing, and the sandbox is still suspended there), and otherwise to
// the state the worker reports.
func (s *Service) settle(ctx context.Context, id string, t Rule, cause error, before store.SandboxState) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	log := s.logger.With("sandbox", id)
	if t.FailOnDataLoss && errdefs.ClassOf(cause) == errdefs.ErrDataLoss {
		// The worker keeps the damaged snapshot until the sandbox is deleted.
		s.endCommands(ctx, id, agentproto.ReasonLost, nil)
		if _, err := s.store.TransitionSandbox(ctx, store.AnyTenant, id, t.Running(), store.SandboxFailed,
			func(sb *store.Sandbox) error {
				sb.LastError = operation.PublicError(cause)
				return nil
			}); err != nil {
			log.Error("mark sandbox failed", "err", err)
		}
		return
	}
	if _, err := s.worker.Sandbox(ctx, id); err != nil && before != "" && !errors.Is(err, errdefs.ErrNotFound) {
		if _, terr := s.store.TransitionSandbox(ctx, store.AnyTenant, id, Only(t.During), before, nil); terr != nil {
			log.Error("settle sandbox state", "to", before, "err", terr)
			return
		}
		log.Warn("the worker cannot say how the sandbox stands: back to its state before the call", "to", before, "err", err)
		return
	}
	s.settleTo(ctx, id, t.During)
}

// settleTo moves a sandbox from state via to what the worker reports of it.
func (s *Service) settleTo(ctx context.Context, id string, via store.SandboxState) {
	log := s.logger.With("sandbox", id)
	st, err := s.worker.Sandbox(ctx, id)
	to := storeState(st.State)
	if err != nil || to == "" {
		log.Warn("sandbox VM is gone", "err", err, "vm_state", st.State)
		s.failSandbox(ctx, id, errdefs.New(errdefs.ErrUnavailable, "the sandbox's VM stopped unexpectedly"), via)
		return
	}
	if _, err := s.store.TransitionSandbox(ctx, store.AnyTenant, id, Only(via), to, nil); err != nil {
		log.Error("settle sandbox state", "to", to, "err", err)
		return
	}
	log.Info("sandbox state settled from the worker", "from", via, "to", to)
}

// storeState is the sandbox state of a worker VM state ("" for a VM that
// is gone).
func storeState(vm worker.VMState) store.SandboxState {
	switch vm {
	case worker.VMRunning:
		return store.SandboxRunning
	case worker.VMPaused:
		return store.SandboxPaused
	case worker.VMSuspended:
		return store.SandboxSuspended
	}
	return ""
}

// SubmitDelete marks the sandbox deleting and submits its delete operation in
// one transaction.
func (s *Service) SubmitDelete(ctx context.Context, tenantID, id string) (*store.Operation, error) {
	return s.ops.Submit(ctx, &store.Operation{TenantID: tenantID, Type: store.OpDelete, Target: id},
		func(ctx context.Context, tx store.Store) error {
			_, err := tx.TransitionSandbox(ctx, tenantID, id, deleteRule.From, deleteRule.During, nil)
			return err
		})
}
