package operation

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// Operation leases let several control replicas share one store. An engine
// claims every operation it submits, in the transaction that creates it,
// and renews the leases of all it has queued or running every LeaseTTL/3.
// Every write it makes about an operation checks that the lease is still
// its own, so a replica that lost one (it stalled past the lease, another
// replica took the operation over) cannot overwrite the new owner's
// verdict. The same loop takes over operations whose lease ran out: a
// pending one is run here (its submit's changes are committed, so running
// it is what its replica would have done); a running one goes to
// TakenOver, still running, so the caller makes its target's state true,
// and only then ends failed "aborted" (a handler half done on a lost
// replica cannot be resumed), unless TakenOver asks for its handler to run
// again. A running operation holds its target (store.StartOperation), so
// nothing else starts on that target until it has ended. With one replica
// every lease is its own and nothing changes hands.

// DefaultLeaseTTL is how long an operation lease lasts without renewal.
const DefaultLeaseTTL = 30 * time.Second

// takeOverBatch bounds the operations one take-over pass claims.
const takeOverBatch = 64

// defaultOwner names the engine in leases when Config.Owner is empty.
func defaultOwner() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "spaced"
}

// guard wraps a TransitionOperation mutate so that it applies only while the
// operation's lease is this engine's.
func (e *Engine) guard(mutate func(*store.Operation) error) func(*store.Operation) error {
	return func(o *store.Operation) error {
		if o.LeaseOwner != e.owner {
			return errdefs.New(errdefs.ErrConflict, "operation %s is held by another control replica", o.ID).
				WithDetails(map[string]any{"state": string(o.State)})
		}
		if mutate == nil {
			return nil
		}
		return mutate(o)
	}
}

// leaseLoop renews this engine's leases and takes over expired ones until
// the engine stops.
func (e *Engine) leaseLoop() {
	defer close(e.loopDone)
	tick := time.NewTicker(e.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-e.baseCtx.Done():
			return
		case <-tick.C:
		}
		e.renew()
		e.takeOver()
	}
}

// renew extends the leases of every operation this engine knows and cancels
// the handlers of those another replica has taken.
func (e *Engine) renew() {
	e.mu.Lock()
	ids := make([]string, 0, len(e.known))
	for id := range e.known {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(e.baseCtx, e.ttl)
	defer cancel()
	held, err := e.store.RenewOperationLeases(ctx, e.owner, ids, e.ttl)
	if err != nil {
		e.log.Warn("renew operation leases", "count", len(ids), "err", err)
		return
	}
	for _, id := range ids {
		if slices.Contains(held, id) {
			continue
		}
		op, err := e.store.GetOperation(ctx, store.AnyTenant, id)
		if err != nil || op.LeaseOwner == e.owner {
			continue // finished here meanwhile, or unreadable now: the next pass sees it
		}
		e.mu.Lock()
		stop := e.cancels[id]
		e.mu.Unlock()
		if stop == nil {
			continue // queued: its start finds the lease gone
		}
		e.log.Warn("operation lease lost to another control replica: cancelling its handler",
			"op", id, "state", op.State, "owner", op.LeaseOwner)
		stop()
	}
}

// takeOver claims operations whose replica stopped renewing their leases.
func (e *Engine) takeOver() {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return
	}
	ctx, cancel := context.WithTimeout(e.baseCtx, e.ttl)
	defer cancel()
	ops, err := e.store.ClaimExpiredOperations(ctx, e.owner, e.ttl, takeOverBatch)
	if err != nil {
		e.log.Warn("take over expired operations", "err", err)
		return
	}
	for _, op := range ops {
		e.mu.Lock()
		mine := e.known[op.ID]
		e.mu.Unlock()
		switch {
		case mine: // this engine's own lease had run out; it is renewed now
		case op.State == store.OpPending:
			e.log.Warn("took over a pending operation of a lost control replica", "op", op.ID, "type", op.Type, "target", op.Target)
			e.enqueue(op)
		default:
			e.mu.Lock()
			if e.closed {
				e.mu.Unlock()
				continue // its lease runs out again; the next taker settles it
			}
			e.known[op.ID] = true // renewed from now on
			e.wg.Add(1)
			e.mu.Unlock()
			go e.settleTakenOver(op)
		}
	}
}

// settleTakenOver ends a running operation taken over from a lost replica:
// TakenOver makes its target true first, while it still runs (so it still
// holds its target: no other operation on it starts), then it ends failed
// "aborted", or its handler runs again here. An engine closing before that
// is done leaves it running under a lease that runs out, for another
// replica to settle.
func (e *Engine) settleTakenOver(op *store.Operation) {
	defer e.wg.Done()
	defer e.forget(op.ID)
	release, ok := e.slots.acquire(e.baseCtx, op.TenantID)
	if !ok {
		return
	}
	defer release()
	ctx, cancel := context.WithCancel(e.baseCtx)
	defer cancel()
	e.mu.Lock()
	e.cancels[op.ID] = cancel
	e.mu.Unlock()
	log := e.log.With("op", op.ID, "type", op.Type, "target", op.Target)
	log.Warn("took over a running operation of a lost control replica: settling its target before it ends")
	rerun, err := e.reconcile(ctx, op)
	if err != nil {
		log.Error("settle the target of a taken-over operation", "err", err)
	}
	if e.baseCtx.Err() != nil {
		return // closing: not known to be settled
	}
	if rerun && err == nil {
		log.Warn("running a taken-over operation again")
		e.execute(ctx, op)
		return
	}
	done, err := e.abort(context.WithoutCancel(ctx), op.ID, "its control replica was lost while it ran")
	if err != nil {
		log.Error("end operation of a lost control replica", "err", err)
		return
	}
	if done != nil {
		log.Warn("ended a running operation of a lost control replica")
	}
}

// reconcile calls TakenOver, turning a panic into an error.
func (e *Engine) reconcile(ctx context.Context, op *store.Operation) (rerun bool, err error) {
	if e.takenOver == nil {
		return false, nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("take-over hook panicked: %v: %w", r, errdefs.ErrInternal)
		}
	}()
	return e.takenOver(ctx, op), nil
}

// abort ends an unfinished operation this engine holds as failed "aborted".
// It returns nil, nil when the operation finished or changed hands meanwhile.
func (e *Engine) abort(ctx context.Context, id, why string) (*store.Operation, error) {
	done, err := e.store.TransitionOperation(ctx, id, []store.OperationState{store.OpPending, store.OpRunning}, store.OpFailed,
		e.guard(func(o *store.Operation) error {
			o.Error = &store.ErrorInfo{Code: errdefs.ErrAborted.Code(), Message: why}
			return nil
		}))
	if errdefs.ClassOf(err) == errdefs.ErrConflict {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	e.metrics.finished(done.Type, done.State)
	e.notify(id)
	return done, nil
}

// TakeOverExpired runs one take-over pass now, as the lease loop does every
// LeaseTTL/3: pending operations whose lease ran out are run here, running
// ones go to TakenOver and then end failed "aborted" (or run again). A control replica calls it
// at start instead of Recover: its Owner is new (host, pid and a random
// part), so no lease is its own leftover, and an operation another live
// replica holds is never touched, only those whose replica stopped
// renewing.
func (e *Engine) TakeOverExpired() { e.takeOver() }
