package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/workerpb"
)

// codes maps each errdefs class to the Connect code nearest in meaning.
// The code alone is lossy (conflict and aborted share one, so do
// payload_too_large and resource_exhausted): the exact class travels in
// the error's ErrorInfo detail, and the code is what a client without it
// (curl, another language) reads.
var codes = map[*errdefs.Class]connect.Code{
	errdefs.ErrInvalidArgument:    connect.CodeInvalidArgument,
	errdefs.ErrUnauthenticated:    connect.CodeUnauthenticated,
	errdefs.ErrPermissionDenied:   connect.CodePermissionDenied,
	errdefs.ErrNotFound:           connect.CodeNotFound,
	errdefs.ErrConflict:           connect.CodeAborted,
	errdefs.ErrFailedPrecondition: connect.CodeFailedPrecondition,
	errdefs.ErrPayloadTooLarge:    connect.CodeResourceExhausted,
	errdefs.ErrResourceExhausted:  connect.CodeResourceExhausted,
	errdefs.ErrInternal:           connect.CodeInternal,
	errdefs.ErrUnavailable:        connect.CodeUnavailable,
	errdefs.ErrAborted:            connect.CodeAborted,
	errdefs.ErrDataLoss:           connect.CodeDataLoss,
	errdefs.ErrDeadlineExceeded:   connect.CodeDeadlineExceeded,
	errdefs.ErrCancelled:          connect.CodeCanceled,
}

// classes maps a Connect code back to a class when no ErrorInfo says it.
var classes = map[connect.Code]*errdefs.Class{
	connect.CodeCanceled:           errdefs.ErrCancelled,
	connect.CodeUnknown:            errdefs.ErrInternal,
	connect.CodeInvalidArgument:    errdefs.ErrInvalidArgument,
	connect.CodeDeadlineExceeded:   errdefs.ErrDeadlineExceeded,
	connect.CodeNotFound:           errdefs.ErrNotFound,
	connect.CodeAlreadyExists:      errdefs.ErrConflict,
	connect.CodePermissionDenied:   errdefs.ErrPermissionDenied,
	connect.CodeResourceExhausted:  errdefs.ErrResourceExhausted,
	connect.CodeFailedPrecondition: errdefs.ErrFailedPrecondition,
	connect.CodeAborted:            errdefs.ErrConflict,
	connect.CodeOutOfRange:         errdefs.ErrInvalidArgument,
	connect.CodeUnimplemented:      errdefs.ErrFailedPrecondition,
	connect.CodeInternal:           errdefs.ErrInternal,
	connect.CodeUnavailable:        errdefs.ErrUnavailable,
	connect.CodeDataLoss:           errdefs.ErrDataLoss,
	connect.CodeUnauthenticated:    errdefs.ErrUnauthenticated,
}

// toWire turns a handler's error into what the server sends: the class,
// public message and details errdefs.Render gives (nothing of the internal
// cause, which is logged here when the class is internal).
func toWire(log *slog.Logger, procedure string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) && errdefs.ClassOf(err) == errdefs.ErrInternal {
		// Connect's own (a message over the bound, a bad frame): its code
		// and words say nothing private.
		class := classes[ce.Code()]
		out := connect.NewError(ce.Code(), errors.New(ce.Message()))
		addInfo(out, class, nil)
		return out
	}
	class, msg, details := errdefs.Render(err)
	if class == errdefs.ErrInternal {
		log.Warn("worker protocol call failed", "procedure", procedure, "err", err)
	} else {
		log.Debug("worker protocol call failed", "procedure", procedure, "class", class.Code(), "err", err)
	}
	code, ok := codes[class]
	if !ok {
		code = connect.CodeInternal
	}
	out := connect.NewError(code, errors.New(msg))
	addInfo(out, class, details)
	return out
}

func addInfo(e *connect.Error, class *errdefs.Class, details map[string]any) {
	info := &workerpb.ErrorInfo{Class: class.Code()}
	if len(details) > 0 {
		if b, err := json.Marshal(details); err == nil {
			info.DetailsJson = b
		}
	}
	if d, err := connect.NewErrorDetail(info); err == nil {
		e.AddDetail(d)
	}
}

// fromWire turns a call's error back into an errdefs error of the class
// the server sent (a *errdefs.Public with its message and details). An
// error the server did not send is the caller's deadline or cancellation
// when ctx ended, else a failed link: errdefs.ErrUnavailable.
func fromWire(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("worker %s: %w: %w", what, errdefs.ErrDeadlineExceeded, ctx.Err())
	case ctx.Err() != nil:
		return fmt.Errorf("worker %s: %w: %w", what, errdefs.ErrCancelled, ctx.Err())
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || !connect.IsWireError(ce) {
		if ce != nil && ce.Code() == connect.CodeResourceExhausted {
			return fmt.Errorf("worker %s: %w: %w", what, errdefs.ErrResourceExhausted, err)
		}
		return fmt.Errorf("worker %s: %w: %w", what, errdefs.ErrUnavailable, err)
	}
	class := classes[ce.Code()]
	if class == nil {
		class = errdefs.ErrInternal
	}
	var details map[string]any
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			continue
		}
		if info, ok := v.(*workerpb.ErrorInfo); ok {
			class = errdefs.FromCode(info.GetClass())
			if len(info.GetDetailsJson()) > 0 {
				_ = json.Unmarshal(info.GetDetailsJson(), &details)
			}
			break
		}
	}
	msg := ce.Message()
	if msg == "" {
		msg = class.Message()
	}
	return &errdefs.Public{Class: class, Message: msg, Details: details}
}

// linkFailure reports whether err (from fromWire) is worth a retry on a
// new call: the link failed or the server said it cannot answer now.
func linkFailure(err error) bool {
	return errdefs.ClassOf(err) == errdefs.ErrUnavailable
}

// transportFailure reports whether a call's raw error came from the link
// rather than the server: such a call of an idempotent method is retried
// once (the request may or may not have reached the server).
func transportFailure(ctx context.Context, err error) bool {
	var ce *connect.Error
	return err != nil && ctx.Err() == nil && errors.As(err, &ce) && !connect.IsWireError(ce) &&
		ce.Code() == connect.CodeUnavailable
}
