package errdefs

import (
	"context"
	"errors"
)

// Message is the class's generic message: what a tenant reads when an error
// of the class carries no Public message of its own.
func (c *Class) Message() string {
	switch c {
	case ErrInvalidArgument:
		return "invalid argument"
	case ErrUnauthenticated:
		return "missing or invalid API key"
	case ErrPermissionDenied:
		return "permission denied"
	case ErrNotFound:
		return "not found"
	case ErrConflict:
		return "conflict with the current state"
	case ErrFailedPrecondition:
		return "precondition failed"
	case ErrPayloadTooLarge:
		return "payload too large"
	case ErrResourceExhausted:
		return "resource exhausted"
	case ErrUnavailable:
		return "service unavailable, retry later"
	case ErrAborted:
		return "aborted"
	case ErrDataLoss:
		return "data loss"
	case ErrDeadlineExceeded:
		return "deadline exceeded"
	case ErrCancelled:
		return "cancelled"
	}
	return "internal error"
}

// Render is the one rendering of an error for a tenant, used by every edge
// that answers one (HTTP errors, failed operations): the class, message and
// details of the Public error err carries, or else err's outermost class
// with its generic message and no details. A bare context deadline or
// cancellation is deadline_exceeded or cancelled. Nothing of the internal
// cause (paths, hosts, guest output) is in what it returns.
func Render(err error) (c *Class, message string, details map[string]any) {
	var pub *Public
	if errors.As(err, &pub) && pub.Class != nil && pub.Message != "" {
		return pub.Class, pub.Message, pub.Details
	}
	c = ClassOf(err)
	if c == ErrInternal {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			c = ErrDeadlineExceeded
		case errors.Is(err, context.Canceled):
			c = ErrCancelled
		}
	}
	return c, c.Message(), nil
}
