// Package errdefs is SPACE's one error taxonomy. Every package wraps its errors
// around one of these classes with %w; the HTTP edge maps a class to a status
// exactly once (and the Go client maps the status back). Nothing classifies
// errors by matching strings.
package errdefs

import "fmt"

// Class is an error class. Each has the snake_case code the API reports.
type Class struct{ code string }

func (c *Class) Error() string { return c.code }

// Code is the API error code of the class, e.g. "not_found".
func (c *Class) Code() string { return c.code }

// The classes. Wrap them: fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound).
var (
	ErrInvalidArgument    = &Class{"invalid_argument"}
	ErrUnauthenticated    = &Class{"unauthenticated"}
	ErrPermissionDenied   = &Class{"permission_denied"}
	ErrNotFound           = &Class{"not_found"}
	ErrConflict           = &Class{"conflict"}
	ErrFailedPrecondition = &Class{"failed_precondition"}
	ErrPayloadTooLarge    = &Class{"payload_too_large"}
	ErrResourceExhausted  = &Class{"resource_exhausted"}
	ErrInternal           = &Class{"internal"}
	ErrUnavailable        = &Class{"unavailable"}
	ErrAborted            = &Class{"aborted"}
	ErrDataLoss           = &Class{"data_loss"}
	ErrDeadlineExceeded   = &Class{"deadline_exceeded"}
	ErrCancelled          = &Class{"cancelled"}
)

var all = []*Class{
	ErrInvalidArgument, ErrUnauthenticated, ErrPermissionDenied, ErrNotFound,
	ErrConflict, ErrFailedPrecondition, ErrPayloadTooLarge, ErrResourceExhausted,
	ErrInternal, ErrUnavailable, ErrAborted, ErrDataLoss, ErrDeadlineExceeded, ErrCancelled,
}

// ClassOf returns the outermost class err wraps, or ErrInternal when it
// wraps none. Outermost means nearest to err in its tree of wrapped errors
// (left first among siblings), so the class a layer gives its failure wins
// over the classes of the causes it wraps: fmt.Errorf("%w: %w", ErrInternal,
// fmt.Errorf("open: %w", ErrNotFound)) is internal, not not_found.
func ClassOf(err error) *Class {
	level := []error{err}
	for len(level) > 0 {
		var next []error
		for _, e := range level {
			if c, ok := e.(*Class); ok {
				return c
			}
			switch u := e.(type) {
			case interface{ Unwrap() error }:
				if w := u.Unwrap(); w != nil {
					next = append(next, w)
				}
			case interface{ Unwrap() []error }:
				for _, w := range u.Unwrap() {
					if w != nil {
						next = append(next, w)
					}
				}
			}
		}
		level = next
	}
	return ErrInternal
}

// FromCode returns the class with the given code, or ErrInternal.
func FromCode(code string) *Class {
	for _, c := range all {
		if c.code == code {
			return c
		}
	}
	return ErrInternal
}

// Public is an error whose message is fit for a tenant to read. The cause stays
// for logs; Error() returns only the public message so a cause can never leak
// through a careless %v at the edge.
type Public struct {
	Class   *Class
	Message string
	Details map[string]any
	Cause   error
}

func (e *Public) Error() string { return e.Message }

// Unwrap exposes the class (for errors.Is) and the cause.
func (e *Public) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Class, e.Cause}
	}
	return []error{e.Class}
}

// New returns a public error of class c.
func New(c *Class, format string, args ...any) *Public {
	return &Public{Class: c, Message: fmt.Sprintf(format, args...)}
}

// WithDetails returns e with details added.
func (e *Public) WithDetails(kv map[string]any) *Public {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	for k, v := range kv {
		e.Details[k] = v
	}
	return e
}

// WithCause records the internal cause (logged, never shown to tenants).
func (e *Public) WithCause(err error) *Public { e.Cause = err; return e }
