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

// run executes one queued operation and records how it ended.
func (e *Engine) run(id string) {
	defer e.forget(id)
	ctx, cancel := context.WithCancel(e.baseCtx)
	defer cancel()
	// Store writes about the operation must not fail because the operation
	// itself was cancelled.
	storeCtx := context.WithoutCancel(ctx)

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return // stays pending; Recover at the next start ends it
	}
	e.cancels[id] = cancel
	e.mu.Unlock()

	// Claimed before it runs: the lease taken at submit (or take-over)
	// must still be this engine's.
	op, err := e.store.TransitionOperation(storeCtx, id, []store.OperationState{store.OpPending}, store.OpRunning, e.guard(nil))
	if err != nil {
		if errdefs.ClassOf(err) != errdefs.ErrConflict {
			e.log.Error("start operation", "op", id, "err", err)
		}
		return // cancelled, recovered or taken over before it started
	}
	e.notify(id)

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
