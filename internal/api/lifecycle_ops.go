package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// A lifecycle operation moves a sandbox along its verb's row of the state
// machine (internal/sandbox) while the worker acts.
var (
	pauseRule   = sandbox.RuleOf(sandbox.Pause)
	suspendRule = sandbox.RuleOf(sandbox.Suspend)
	wakeRule    = sandbox.RuleOf(sandbox.Wake)
	restoreRule = sandbox.RuleOf(sandbox.Restore)
)

// registerLifecycle registers the lifecycle operation handlers.
func (s *Server) registerLifecycle() {
	s.ops.Register(store.OpPause, s.runTransition(pauseRule, func(ctx context.Context, op *store.Operation) (worker.SandboxStatus, error) {
		return s.worker.PauseSandbox(ctx, op.Target)
	}))
	s.ops.Register(store.OpSuspend, s.runTransition(suspendRule, func(ctx context.Context, op *store.Operation) (worker.SandboxStatus, error) {
		return s.worker.SuspendSandbox(ctx, op.Target)
	}))
	s.ops.Register(store.OpWake, s.runTransition(wakeRule, func(ctx context.Context, op *store.Operation) (worker.SandboxStatus, error) {
		return s.worker.WakeSandbox(ctx, op.Target)
	}))
	s.ops.Register(store.OpRestore, s.runTransition(restoreRule, s.restoreOnWorker))
	s.ops.Register(store.OpCheckpoint, s.runCheckpoint)
	s.ops.Register(store.OpBranch, s.runCreate)
}

func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) error {
	return s.submitTransition(w, r, store.OpPause, pauseRule, nil)
}

func (s *Server) suspendSandbox(w http.ResponseWriter, r *http.Request) error {
	return s.submitTransition(w, r, store.OpSuspend, suspendRule, nil)
}

func (s *Server) wakeSandbox(w http.ResponseWriter, r *http.Request) error {
	return s.submitTransition(w, r, store.OpWake, wakeRule, nil)
}

// submitTransition answers a lifecycle call: 409 with the current state
// when the sandbox is in none of t.From, else 202 with the operation.
func (s *Server) submitTransition(w http.ResponseWriter, r *http.Request, typ store.OperationType, t sandbox.Rule, params any) error {
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	op, err := s.submitOn(r.Context(), sb, typ, t.From, params)
	if err != nil {
		return err
	}
	s.log(r).Info("sandbox "+string(typ)+" submitted", "sandbox", sb.ID, "op", op.ID)
	writeJSON(w, http.StatusAccepted, apiv1.OperationResponse{Operation: toOperation(op)})
	return nil
}

// submitOn submits an operation on sb after checking, in the same
// transaction, that it is in one of from.
func (s *Server) submitOn(ctx context.Context, sb *store.Sandbox, typ store.OperationType, from []store.SandboxState, params any) (*store.Operation, error) {
	return s.submitOnChecked(ctx, sb, typ, from, params, nil)
}

// submitOnChecked is submitOn that also runs check (when set) on the
// sandbox's current row in the same transaction.
func (s *Server) submitOnChecked(ctx context.Context, sb *store.Sandbox, typ store.OperationType, from []store.SandboxState, params any,
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
		if err := sandbox.RequireState(cur, from...); err != nil {
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
func (s *Server) runTransition(t sandbox.Rule, act func(ctx context.Context, op *store.Operation) (worker.SandboxStatus, error)) operation.Handler {
	return func(ctx context.Context, op *store.Operation, report operation.ProgressFunc) (any, error) {
		log := s.logger.With("op", op.ID, "sandbox", op.Target)
		sb, err := s.store.TransitionSandbox(ctx, store.AnyTenant, op.Target, t.From, t.During, nil)
		if err != nil {
			return nil, err
		}
		s.life.leftRunning(sb.ID)
		report(ctx, t.Step, 20)
		st, werr := act(ctx, op)
		if werr != nil {
			log.Warn("sandbox "+string(op.Type)+" failed", "err", causeString(werr))
			s.settle(ctx, sb.ID, t, werr)
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
		out := toSandbox(sb)
		out.Usage = usageOf(st)
		return out, nil
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
// wake, and otherwise to the state the worker reports.
func (s *Server) settle(ctx context.Context, id string, t sandbox.Rule, cause error) {
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
	s.settleTo(ctx, id, t.During)
}

// settleTo moves a sandbox from state via to what the worker reports of it.
func (s *Server) settleTo(ctx context.Context, id string, via store.SandboxState) {
	log := s.logger.With("sandbox", id)
	st, err := s.worker.Sandbox(ctx, id)
	to := storeState(st.State)
	if err != nil || to == "" {
		log.Warn("sandbox VM is gone", "err", err, "vm_state", st.State)
		s.failSandbox(ctx, id, errdefs.New(errdefs.ErrUnavailable, "the sandbox's VM stopped unexpectedly"), via)
		return
	}
	if _, err := s.store.TransitionSandbox(ctx, store.AnyTenant, id, sandbox.Only(via), to, nil); err != nil {
		log.Error("settle sandbox state", "to", to, "err", err)
		return
	}
	log.Info("sandbox state settled from the worker", "from", via, "to", to)
}

// storeState is the sandbox state of a worker VM state ("" for a VM that
// is gone).
func storeState(vm string) store.SandboxState {
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

// usageOf is the usage a worker reports of a sandbox.
func usageOf(st worker.SandboxStatus) *apiv1.Usage {
	return &apiv1.Usage{MemoryBytes: st.MemoryBytes, DiskBytes: st.DiskBytes, SnapshotBytes: st.SnapshotBytes}
}
