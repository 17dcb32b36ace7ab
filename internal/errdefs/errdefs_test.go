package errdefs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
)

func TestClassOf(t *testing.T) {
	notFound := fmt.Errorf("open: %w", errdefs.ErrNotFound)
	for _, tc := range []struct {
		name string
		err  error
		want *errdefs.Class
	}{
		{"nil", nil, errdefs.ErrInternal},
		{"no class", errors.New("boom"), errdefs.ErrInternal},
		{"context error alone", context.DeadlineExceeded, errdefs.ErrInternal},
		{"the class itself", errdefs.ErrConflict, errdefs.ErrConflict},
		{"wrapped once", fmt.Errorf("x: %w", errdefs.ErrNotFound), errdefs.ErrNotFound},
		{"wrapped deep", fmt.Errorf("a: %w", fmt.Errorf("b: %w", fmt.Errorf("c: %w", errdefs.ErrDataLoss))), errdefs.ErrDataLoss},
		{"outer class wins over its cause's", fmt.Errorf("%w: %w", errdefs.ErrInternal, notFound), errdefs.ErrInternal},
		{"outer class after the cause in the format", fmt.Errorf("%w: %w", notFound, errdefs.ErrUnavailable), errdefs.ErrUnavailable},
		{"left sibling first", fmt.Errorf("%w %w", errdefs.ErrDeadlineExceeded, errdefs.ErrNotFound), errdefs.ErrDeadlineExceeded},
		{"join: nearest first", errors.Join(notFound, errdefs.ErrAborted), errdefs.ErrAborted},
		{"join: left first at one depth", errors.Join(errdefs.ErrConflict, errdefs.ErrInternal), errdefs.ErrConflict},
		{"public error's class over its cause", errdefs.New(errdefs.ErrUnavailable, "gone").WithCause(notFound), errdefs.ErrUnavailable},
		{"public error wrapped", fmt.Errorf("op: %w", errdefs.New(errdefs.ErrPermissionDenied, "no")), errdefs.ErrPermissionDenied},
		{"public error inside a class", fmt.Errorf("%w: %w", errdefs.ErrResourceExhausted, errdefs.New(errdefs.ErrNotFound, "x")), errdefs.ErrResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errdefs.ClassOf(tc.err); got != tc.want {
				t.Errorf("ClassOf(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}

func TestFromCodeRoundTrips(t *testing.T) {
	for _, c := range []*errdefs.Class{
		errdefs.ErrInvalidArgument, errdefs.ErrUnauthenticated, errdefs.ErrPermissionDenied, errdefs.ErrNotFound,
		errdefs.ErrConflict, errdefs.ErrFailedPrecondition, errdefs.ErrPayloadTooLarge, errdefs.ErrResourceExhausted,
		errdefs.ErrInternal, errdefs.ErrUnavailable, errdefs.ErrAborted, errdefs.ErrDataLoss,
		errdefs.ErrDeadlineExceeded, errdefs.ErrCancelled,
	} {
		if got := errdefs.FromCode(c.Code()); got != c {
			t.Errorf("FromCode(%q) = %s", c.Code(), got)
		}
	}
	if got := errdefs.FromCode("no_such_code"); got != errdefs.ErrInternal {
		t.Errorf("FromCode(unknown) = %s, want internal", got)
	}
}

func TestPublicHidesItsCause(t *testing.T) {
	err := errdefs.New(errdefs.ErrUnavailable, "the agent is gone").WithCause(errors.New("/var/lib/space/x: EIO"))
	if err.Error() != "the agent is gone" {
		t.Errorf("Error() = %q", err.Error())
	}
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Error("the class is not reachable with errors.Is")
	}
}

func TestRender(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code string
		msg  string
	}{
		{"public", errdefs.New(errdefs.ErrConflict, "sandbox is paused").WithCause(errors.New("/var/lib/x")), "conflict", "sandbox is paused"},
		{"public wrapped", fmt.Errorf("op: %w", errdefs.New(errdefs.ErrNotFound, "no such sandbox")), "not_found", "no such sandbox"},
		{"class only: its generic message", fmt.Errorf("mkfs /var/lib/space/x: %w", errdefs.ErrUnavailable), "unavailable", "service unavailable, retry later"},
		{"unclassified", errors.New("open /dev/kvm: EACCES"), "internal", "internal error"},
		{"context deadline", fmt.Errorf("boot: %w", context.DeadlineExceeded), "deadline_exceeded", "deadline exceeded"},
		{"context cancelled", fmt.Errorf("boot: %w", context.Canceled), "cancelled", "cancelled"},
		{"class beats context", fmt.Errorf("%w: %w", errdefs.ErrAborted, context.Canceled), "aborted", "aborted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, msg, _ := errdefs.Render(tc.err)
			if c.Code() != tc.code || msg != tc.msg {
				t.Errorf("Render = %s %q, want %s %q", c.Code(), msg, tc.code, tc.msg)
			}
		})
	}
}
