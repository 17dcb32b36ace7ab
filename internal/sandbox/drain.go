package sandbox

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// A node drain moves a sandbox that nobody asked to move: its worker
// (a worker.Drainer, cluster mode) suspends it to object storage because
// Kubernetes evicts its Pod. The service records that as a suspend
// operation with DrainParams, which shows the sandbox suspending while its
// worker works and waits for the drain's end; a sandbox that was running
// is then woken by a wake operation (on another worker, as any wake)
// unless the drain policy keeps it suspended. Either is an operation like
// any other: a control replica that dies mid-drain leaves it to the
// take-over, and the leader's ReconcileLive records a drain no Exit
// reported. Every replica reads the Exit; the first records the drain.

// DrainParams are the params of a suspend operation that records a drain.
type DrainParams struct {
	Drain bool `json:"drain"`
	// WasRunning records that the sandbox ran when its drain was
	// recorded: only such a sandbox is woken after it, also by a replica
	// that takes the drain over from a lost one (takeover.go).
	WasRunning bool `json:"was_running,omitempty"`
}

// drainParamsOf returns op's DrainParams, and whether op records a drain.
func drainParamsOf(op *store.Operation) (DrainParams, bool) {
	var p DrainParams
	if op.Type != store.OpSuspend || len(op.Params) == 0 || json.Unmarshal(op.Params, &p) != nil {
		return DrainParams{}, false
	}
	return p, p.Drain
}

// submitDrain records the drain of sandbox id as a suspend operation
// (nothing when it is in no state a suspend starts from: creating,
// deleting, or already moving).
func (s *Service) submitDrain(ctx context.Context, id string) {
	d, ok := s.worker.(worker.Drainer)
	if !ok {
		return
	}
	log := s.logger.With("sandbox", id)
	if !d.Draining(id) {
		log.Info("drain notice for a sandbox not being drained now; ignored")
		return
	}
	sb, err := s.store.GetSandbox(ctx, store.AnyTenant, id)
	if err != nil {
		log.Warn("drain of unknown sandbox", "err", err)
		return
	}
	// Every control replica sees the eviction: the first to submit
	// records it (the checks run in the submit's transaction). The drain
	// is asked about again there: a replica that read the notice late,
	// after the whole drain and its wake, records nothing.
	params := DrainParams{Drain: true, WasRunning: sb.State == running}
	stillDraining := func(ctx context.Context, tx store.Store, cur *store.Sandbox) error {
		if !d.Draining(id) {
			return errdefs.New(errdefs.ErrConflict, "sandbox %s is no longer being drained", id)
		}
		return drainNotRecorded(ctx, tx, cur)
	}
	op, err := s.SubmitOnChecked(ctx, sb, store.OpSuspend, RuleOf(Suspend).From, params, stillDraining)
	if err != nil {
		if errdefs.ClassOf(err) != errdefs.ErrConflict {
			log.Error("record drain", "err", err)
		}
		return
	}
	log.Info("sandbox's node is drained: recording its suspend", "op", op.ID, "state", sb.State)
}

// drainNotRecorded refuses (conflict) a second drain's suspend while one
// is unfinished on the sandbox.
func drainNotRecorded(ctx context.Context, tx store.Store, cur *store.Sandbox) error {
	f := store.OperationFilter{TenantID: cur.TenantID, Target: cur.ID}
	f.PageSize = 20 // newest first: an unfinished one is among the latest
	page, err := tx.ListOperations(ctx, f)
	if err != nil {
		return err
	}
	for _, op := range page.Items {
		if _, drain := drainParamsOf(op); drain && (op.State == store.OpPending || op.State == store.OpRunning) {
			return errdefs.New(errdefs.ErrConflict, "the drain of sandbox %s is recorded already (%s)", cur.ID, op.ID)
		}
	}
	return nil
}

// runSuspend is the suspend operation: the worker's suspend, or for a
// drain the wait for the one its worker makes.
func (s *Service) runSuspend() operation.Handler {
	plain := s.runTransition(RuleOf(Suspend), func(ctx context.Context, op *store.Operation) (worker.SandboxStatus, error) {
		return s.worker.SuspendSandbox(ctx, op.Target)
	})
	return func(ctx context.Context, op *store.Operation, report operation.ProgressFunc) (any, error) {
		if _, drain := drainParamsOf(op); drain {
			return s.runDrain(ctx, op, report)
		}
		return plain(ctx, op, report)
	}
}

// runDrain moves the sandbox to suspending, waits for its drain and ends
// it suspended; a drain that failed fails the sandbox with the drain's
// error (its commands lost); one that was no drain, or outlasted the
// wait, leaves the sandbox in the state its worker reports (the leader's
// ReconcileLive records a drain that ends later).
func (s *Service) runDrain(ctx context.Context, op *store.Operation, report operation.ProgressFunc) (any, error) {
	d, ok := s.worker.(worker.Drainer)
	if !ok {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "this control plane's workers are not drained")
	}
	rule := RuleOf(Suspend)
	log := s.logger.With("op", op.ID, "sandbox", op.Target)
	before, err := s.store.GetSandbox(ctx, store.AnyTenant, op.Target)
	if err != nil {
		return nil, err
	}
	if err := rule.Check(before); err != nil {
		return nil, err
	}
	sb, err := s.store.TransitionSandbox(ctx, store.AnyTenant, op.Target, Only(before.State), rule.During, nil)
	if err != nil {
		return nil, err
	}
	s.life.leftRunning(sb.ID)
	report(ctx, "suspending for a node drain", 20)
	st, werr := d.AwaitDrain(ctx, sb.ID)
	if werr != nil {
		switch errdefs.ClassOf(werr) {
		case errdefs.ErrConflict, errdefs.ErrDeadlineExceeded:
			log.Warn("drain did not end with the sandbox suspended; taking its worker's state", "err", CauseString(werr))
			s.settleTo(ctx, sb.ID, rule.During)
		default:
			log.Error("drain failed", "err", CauseString(werr))
			s.failSandbox(ctx, sb.ID, werr, rule.During)
		}
		return nil, werr
	}
	sb, err = s.store.TransitionSandbox(context.WithoutCancel(ctx), store.AnyTenant, sb.ID, Only(rule.During), rule.To, nil)
	if err != nil {
		return nil, err
	}
	log.Info("sandbox suspended by a node drain", "was", before.State)
	if before.State == running {
		s.wakeDrained(context.WithoutCancel(ctx), sb, log)
	}
	return Status{Sandbox: sb, Worker: &st}, nil
}

// wakeDrained submits the wake of sb, suspended by a drain while it ran,
// unless the drain policy keeps it suspended. A paused sandbox is never
// woken: a wake would run the vCPUs its tenant stopped.
func (s *Service) wakeDrained(ctx context.Context, sb *store.Sandbox, log *slog.Logger) {
	if d, ok := s.worker.(worker.Drainer); !ok || !d.WakeAfterDrain() {
		return
	}
	if wake, err := s.SubmitOn(ctx, sb, store.OpWake, RuleOf(Wake).From, nil); err != nil {
		log.Error("wake drained sandbox", "err", err)
	} else {
		log.Info("waking drained sandbox on another worker", "wake_op", wake.ID)
	}
}
