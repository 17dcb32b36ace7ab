// Package operation runs the control plane's asynchronous lifecycle work.
// An operation is persisted (pending) before anything acts on it, in the same
// transaction as the object it changes; an in-process executor then runs the
// handler registered for its type, with bounded concurrency (of which one
// tenant holds at most its share) and strictly one operation at a time per
// target, in submission order. Every operation ends
// in a terminal state: handlers' results and errors are recorded, cancel is
// honoured, and Recover ends whatever a crash interrupted.
//
// Several engines (control replicas) may share one store: each holds the
// operations it runs under a lease it renews, and takes over those whose
// replica stopped renewing (lease.go).
//
// The engine knows nothing of sandboxes or HTTP: handlers do the work and
// keep their objects' states right; the engine owns only operation records.
package operation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// ProgressFunc records how far a running operation has come. Failures to
// record are logged, never returned: progress is advisory.
type ProgressFunc func(ctx context.Context, step string, percent int)

// Handler does the work of one operation. ctx is cancelled when the
// operation is cancelled or the engine closes. The result is stored as JSON
// (nil for none). An error's errdefs class becomes the operation's error
// code; its message reaches the tenant only when it is an *errdefs.Public.
type Handler func(ctx context.Context, op *store.Operation, report ProgressFunc) (result any, err error)

// Config configures an Engine.
type Config struct {
	Store  store.Store
	Logger *slog.Logger
	// Concurrency bounds how many handlers run at once (default
	// DefaultConcurrency).
	Concurrency int
	// TenantShare bounds how many of those one tenant's operations hold at
	// once (slots.go), so one tenant flooding operations cannot starve
	// another's. Default: half of Concurrency, at least 1.
	TenantShare int
	// Registerer, when set, gets the engine's metrics.
	Registerer prometheus.Registerer
	// Owner names this engine in operation leases: unique among the
	// engines sharing the store, and stable across this one's restarts (so
	// Recover ends its leftovers at once). Default: the host name.
	Owner string
	// LeaseTTL is how long a lease lasts unrenewed (default
	// DefaultLeaseTTL); leases are renewed, and expired ones of other
	// engines taken over, every LeaseTTL/3.
	LeaseTTL time.Duration
	// TakenOver, when set, gets each running operation this engine took
	// over because its engine's lease ran out (pending ones it runs
	// itself), while the operation still runs, leased here: it makes the
	// target's state true, and then the engine ends the operation failed
	// "aborted", or, when TakenOver returns rerun, runs its handler again
	// here and records that outcome (for a handler that finishes from
	// wherever its lost run stopped, such as a delete). So no client sees
	// the operation ended while its target still says otherwise, and a
	// replica lost in the middle of this leaves the operation running for
	// the next take-over to do again: TakenOver must be idempotent.
	TakenOver func(ctx context.Context, op *store.Operation) (rerun bool)
}

// DefaultConcurrency is Config.Concurrency's default: each slot is one
// lifecycle call in flight to a worker, which on a real host is a VM
// booting, restoring or snapshotting, so a few keep a small host busy.
const DefaultConcurrency = 8

// cancelGrace is how long Close waits for cancelled handlers to return.
const cancelGrace = 5 * time.Second

// Engine submits, runs, cancels and waits for operations.
type Engine struct {
	store   store.Store
	log     *slog.Logger
	slots   *slots
	metrics *metrics

	owner     string
	ttl       time.Duration
	takenOver func(ctx context.Context, op *store.Operation) (rerun bool)
	loopDone  chan struct{} // closed when the lease loop has stopped

	baseCtx context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	handlers map[store.OperationType]Handler
	queues   map[string][]queued           // target -> ops waiting, in order
	active   map[string]bool               // target -> a runner goroutine exists
	known    map[string]bool               // op ids this engine queued and has not finished
	cancels  map[string]context.CancelFunc // running op id -> cancel
	waiters  map[string]chan struct{}      // op id -> closed when the op changes
}

// New returns an engine. It runs operations as soon as they are submitted;
// call Recover before submitting the first one after a start.
func New(cfg Config) *Engine {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.TenantShare <= 0 {
		cfg.TenantShare = max(cfg.Concurrency/2, 1)
	}
	cfg.TenantShare = min(cfg.TenantShare, cfg.Concurrency)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := newMetrics(cfg.Registerer)
	e := &Engine{
		store:     cfg.Store,
		log:       log,
		slots:     newSlots(cfg.Concurrency, cfg.TenantShare, m.waitedForShare),
		metrics:   m,
		owner:     cfg.Owner,
		ttl:       cfg.LeaseTTL,
		takenOver: cfg.TakenOver,
		loopDone:  make(chan struct{}),
		baseCtx:   ctx,
		stop:      cancel,
		handlers:  map[store.OperationType]Handler{},
		queues:    map[string][]queued{},
		active:    map[string]bool{},
		known:     map[string]bool{},
		cancels:   map[string]context.CancelFunc{},
		waiters:   map[string]chan struct{}{},
	}
	go e.leaseLoop()
	return e
}

// Register sets the handler of an operation type. Register before Submit.
func (e *Engine) Register(typ store.OperationType, h Handler) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.handlers[typ] = h
}

// Submit persists op as pending, leased to this engine, and queues it. When
// with is not nil it runs in the same transaction, before op is inserted
// (create the object there), so the object never exists without its
// operation or the other way round.
// Submit fills ID (when empty), State, CreatedAt and UpdatedAt; op.TenantID,
// Type and Target must be set. It returns the stored operation.
func (e *Engine) Submit(ctx context.Context, op *store.Operation, with func(ctx context.Context, tx store.Store) error) (*store.Operation, error) {
	if op.Type == "" || op.Target == "" {
		return nil, fmt.Errorf("submit: operation needs a type and a target: %w", errdefs.ErrInvalidArgument)
	}
	e.mu.Lock()
	_, ok := e.handlers[op.Type]
	closed := e.closed
	e.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("submit: no handler for operation type %q: %w", op.Type, errdefs.ErrInternal)
	}
	if closed {
		return nil, errdefs.New(errdefs.ErrUnavailable, "the server is shutting down")
	}
	if op.ID == "" {
		op.ID = store.NewID(store.PrefixOperation)
	}
	op.State = store.OpPending
	op.Progress, op.Error, op.Result, op.DoneAt = nil, nil, nil, nil
	err := e.store.Atomic(ctx, func(ctx context.Context, tx store.Store) error {
		if with != nil {
			if err := with(ctx, tx); err != nil {
				return err
			}
		}
		if err := tx.CreateOperation(ctx, op); err != nil {
			return err
		}
		claimed, err := tx.ClaimOperation(ctx, op.ID, e.owner, e.ttl)
		if err != nil {
			return err
		}
		op.LeaseOwner, op.LeaseExpiresAt = claimed.LeaseOwner, claimed.LeaseExpiresAt
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.metrics.submitted(op.Type)
	e.enqueue(op)
	return op, nil
}

// enqueue adds a persisted pending op to its target's queue and makes sure a
// runner drains that queue.
func (e *Engine) enqueue(op *store.Operation) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return // stays pending; Recover at the next start ends it
	}
	e.known[op.ID] = true
	e.queues[op.Target] = append(e.queues[op.Target], queued{id: op.ID, tenant: op.TenantID})
	if !e.active[op.Target] {
		e.active[op.Target] = true
		e.wg.Add(1)
		go e.drain(op.Target)
	}
}

// drain runs the target's queued operations one after another, so two
// operations on one target never interleave.
func (e *Engine) drain(target string) {
	defer e.wg.Done()
	for {
		e.mu.Lock()
		q := e.queues[target]
		if len(q) == 0 || e.closed {
			delete(e.queues, target)
			delete(e.active, target)
			e.mu.Unlock()
			return
		}
		next := q[0]
		e.queues[target] = q[1:]
		e.mu.Unlock()

		e.startAndRun(next.id, next.tenant)
	}
}

// queued is an operation waiting in its target's queue.
type queued struct{ id, tenant string }

// startAndRun waits for a slot in tenant's share and for id's target to be
// free (no operation of it running on any replica sharing the store),
// starts id and runs it. An operation cancelled, taken over or finished meanwhile is
// dropped; one the engine's close finds waiting stays pending.
func (e *Engine) startAndRun(id, tenant string) {
	wait := turnPollMin
	for {
		release, ok := e.slots.acquire(e.baseCtx, tenant)
		if !ok {
			e.forget(id)
			return
		}
		op, holder, err := e.start(id)
		if op != nil {
			e.run(op)
			release()
			return
		}
		release()
		if holder == nil {
			if err != nil && errdefs.ClassOf(err) != errdefs.ErrConflict {
				e.log.Error("start operation", "op", id, "err", err)
			}
			e.forget(id) // cancelled, recovered or taken over before it started
			return
		}
		// Another operation of the target runs (here, taken over, or on
		// another replica): wait for it to end, or poll the store.
		changed, mine := e.changed(holder.ID), e.changed(id)
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-mine: // cancelled meanwhile
		case <-t.C:
		case <-e.baseCtx.Done():
		}
		t.Stop()
		wait = min(wait*2, turnPollMax)
	}
}

// forget drops an op from the engine's memory and wakes its waiters.
func (e *Engine) forget(id string) {
	e.mu.Lock()
	delete(e.known, id)
	delete(e.cancels, id)
	e.mu.Unlock()
	e.notify(id)
}

// notify wakes everyone waiting on id.
func (e *Engine) notify(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ch, ok := e.waiters[id]; ok {
		close(ch)
		delete(e.waiters, id)
	}
}

// changed returns a channel closed at id's next change.
func (e *Engine) changed(id string) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.waiters[id]
	if !ok {
		ch = make(chan struct{})
		e.waiters[id] = ch
	}
	return ch
}

// Cancel cancels an operation of the tenant (store.AnyTenant: any). A
// pending operation is cancelled for sure; a running one has its context
// cancelled and ends as its handler decides (cancelled when the handler
// returns the context's error). A finished one is returned unchanged.
func (e *Engine) Cancel(ctx context.Context, tenantID, id string) (*store.Operation, error) {
	op, err := e.store.GetOperation(ctx, tenantID, id)
	if err != nil {
		return nil, err
	}
	if op.State == store.OpPending {
		done, err := e.store.TransitionOperation(ctx, id, []store.OperationState{store.OpPending}, store.OpCancelled,
			func(o *store.Operation) error {
				o.Error = &store.ErrorInfo{Code: errdefs.ErrCancelled.Code(), Message: "cancelled before it started"}
				return nil
			})
		if err == nil {
			e.metrics.finished(done.Type, done.State)
			e.notify(id)
			return done, nil
		}
		if errdefs.ClassOf(err) != errdefs.ErrConflict {
			return nil, err
		}
		// It started meanwhile: cancel it as a running one.
	}
	e.mu.Lock()
	cancel := e.cancels[id]
	e.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return e.store.GetOperation(ctx, tenantID, id)
}

// Wait returns the operation as soon as it is terminal or when timeout
// passes (then in whatever state it is). A non-positive timeout reads once.
// It does not poll: it sleeps on the engine's notification of the operation.
func (e *Engine) Wait(ctx context.Context, tenantID, id string, timeout time.Duration) (*store.Operation, error) {
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		ch := e.changed(id) // before the read, so no change slips between
		op, err := e.store.GetOperation(ctx, tenantID, id)
		if err == nil && op.State.Terminal() {
			e.notify(id) // drop the waiter entry; other waiters re-read and return too
		}
		if err != nil || op.State.Terminal() || timeout <= 0 {
			return op, err
		}
		select {
		case <-ch:
		case <-deadline:
			return e.store.GetOperation(ctx, tenantID, id)
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for operation: %w", errdefs.ErrCancelled)
		case <-e.baseCtx.Done():
			return e.store.GetOperation(ctx, tenantID, id)
		}
	}
}

// Recover ends every operation a previous process left unfinished: each
// becomes failed with code "aborted". It skips operations this engine has
// queued itself and those another live engine holds (a lease of another
// owner not yet expired); this engine's own leases from before a restart
// are leftovers. It returns the operations it ended so the caller can
// reconcile their targets (the sandbox state must say what is true).
func (e *Engine) Recover(ctx context.Context) ([]*store.Operation, error) {
	ops, err := e.store.ListUnfinishedOperations(ctx)
	if err != nil {
		return nil, fmt.Errorf("recover operations: %w", err)
	}
	var ended []*store.Operation
	for _, op := range ops {
		e.mu.Lock()
		mine := e.known[op.ID]
		e.mu.Unlock()
		if mine {
			continue
		}
		if _, err := e.store.ClaimOperation(ctx, op.ID, e.owner, e.ttl); errdefs.ClassOf(err) == errdefs.ErrConflict {
			continue // finished meanwhile, or another engine's
		} else if err != nil {
			return ended, fmt.Errorf("recover operation %s: %w", op.ID, err)
		}
		done, err := e.abort(ctx, op.ID, "interrupted by a server restart")
		if err != nil {
			return ended, fmt.Errorf("recover operation %s: %w", op.ID, err)
		}
		if done == nil {
			continue // finished or taken meanwhile
		}
		e.log.WarnContext(ctx, "operation aborted by restart", "op", op.ID, "type", op.Type, "target", op.Target)
		ended = append(ended, done)
	}
	return ended, nil
}

// Close stops taking work, waits for running handlers until ctx ends, then
// cancels them. Operations still queued stay pending in the store (the next
// start's Recover ends them). Safe to call twice.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
		e.stop()
		<-e.loopDone
		return nil
	case <-ctx.Done():
		e.stop()
		defer func() { <-e.loopDone }()
		// Handlers get a short grace to honour the cancel and record their
		// end; one that ignores its context is abandoned, and its operation
		// is ended by Recover at the next start.
		t := time.NewTimer(cancelGrace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			e.log.Warn("operation handlers ignored cancellation at shutdown")
		}
		return fmt.Errorf("close operation engine: %w", errdefs.ErrDeadlineExceeded)
	}
}

// isCancel reports whether err means the handler stopped because its
// context was cancelled.
func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, errdefs.ErrCancelled)
}
