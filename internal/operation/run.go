package operation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// finishTimeout bounds the store writes that record an operation's end.
const finishTimeout = 30 * time.Second

// How often an operation waiting for its target polls the store: from
// turnPollMin, doubling to turnPollMax (the end of a holder this engine
// runs wakes it at once).
const (
	turnPollMin = 50 * time.Millisecond
	turnPollMax = time.Second
)

// start moves a queued operation to running (see store.StartOperation): it
// returns the started operation, or the operation of the target that runs
// now (then nothing changed), or neither when it may not start (an error,
// or a conflict: cancelled, recovered, or its lease is no longer this
// engine's). An engine closed meanwhile starts nothing.
func (e *Engine) start(id string) (op, holder *store.Operation, err error) {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, nil, nil // stays pending; Recover at the next start ends it
	}
	ctx, cancel := context.WithTimeout(e.baseCtx, finishTimeout)
	defer cancel()
	op, holder, err = e.store.StartOperation(ctx, id, e.owner)
	if err != nil {
		return nil, nil, err
	}
	return op, holder, nil
}

// run executes one started operation and records how it ended.
func (e *Engine) run(op *store.Operation) {
	id := op.ID
	defer e.forget(id)
	ctx, cancel := context.WithCancel(e.baseCtx)
	defer cancel()
	e.mu.Lock()
	e.cancels[id] = cancel
	e.mu.Unlock()
	e.notify(id)
	e.execute(ctx, op)
}

// execute runs op's handler (op is running and leased here) and records
// how it ended.
func (e *Engine) execute(ctx context.Context, op *store.Operation) {
	id := op.ID
	// Store writes about the operation must not fail because the operation
	// itself was cancelled.
	storeCtx := context.WithoutCancel(ctx)

	e.mu.Lock()
	h := e.handlers[op.Type]
	e.mu.Unlock()

	start := time.Now()
	report := func(_ context.Context, step string, percent int) {
		_, err := e.store.TransitionOperation(storeCtx, id, []store.OperationState{store.OpRunning}, "",
			e.guard(func(o *store.Operation) error {
				o.Progress = &store.Progress{Step: step, Percent: min(max(percent, 0), 100)}
				return nil
			}))
		if err != nil {
			e.log.Warn("record operation progress", "op", id, "err", err)
			return
		}
		e.notify(id)
	}
	result, herr := e.call(ctx, h, op, report)
	e.metrics.observe(op.Type, time.Since(start))

	fctx, fcancel := context.WithTimeout(storeCtx, finishTimeout)
	defer fcancel()
	to, mutate := e.outcome(ctx, op, result, herr)
	done, err := e.store.TransitionOperation(fctx, id, []store.OperationState{store.OpRunning}, to, e.guard(mutate))
	if err != nil {
		// Conflict: Recover of another engine ended it already, or another
		// engine took it over when this one's lease ran out.
		e.log.Error("record operation end", "op", id, "type", op.Type, "err", err)
		return
	}
	e.metrics.finished(done.Type, done.State)
}

// call runs the handler, turning a panic into an internal error.
func (e *Engine) call(ctx context.Context, h Handler, op *store.Operation, report ProgressFunc) (result any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("operation handler panicked: %v: %w", r, errdefs.ErrInternal)
		}
	}()
	return h(ctx, op, report)
}

// outcome decides an operation's terminal state from its handler's answer.
func (e *Engine) outcome(ctx context.Context, op *store.Operation, result any, herr error) (store.OperationState, func(*store.Operation) error) {
	if herr == nil {
		raw, err := resultJSON(result)
		if err == nil {
			return store.OpSucceeded, func(o *store.Operation) error {
				o.Result = raw
				o.Progress = nil
				return nil
			}
		}
		herr = fmt.Errorf("encode operation result: %v: %w", err, errdefs.ErrInternal)
	}
	state, info := store.OpFailed, PublicError(herr)
	switch {
	case ctx.Err() != nil && e.baseCtx.Err() != nil && isCancel(herr):
		info = &store.ErrorInfo{Code: errdefs.ErrAborted.Code(), Message: "interrupted by a server shutdown"}
	case ctx.Err() != nil && isCancel(herr):
		state = store.OpCancelled
		info = &store.ErrorInfo{Code: errdefs.ErrCancelled.Code(), Message: "cancelled"}
	}
	e.log.Warn("operation failed", "op", op.ID, "type", op.Type, "target", op.Target,
		"state", state, "code", info.Code, "err", herr)
	return state, func(o *store.Operation) error {
		o.Error = info
		return nil
	}
}

// resultJSON encodes a handler's result.
func resultJSON(result any) (json.RawMessage, error) {
	switch r := result.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		return r, nil
	case []byte:
		if !json.Valid(r) {
			return nil, errors.New("result is not JSON")
		}
		return r, nil
	}
	return json.Marshal(result)
}

// PublicError turns an error into what a tenant may see: the errdefs class
// code, and the message of an *errdefs.Public or else a generic one. The
// internal cause never gets in.
func PublicError(err error) *store.ErrorInfo {
	c, msg, _ := errdefs.Render(err)
	return &store.ErrorInfo{Code: c.Code(), Message: msg}
}
