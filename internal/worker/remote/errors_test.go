package remote_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// classedWorker fails Sandbox(id) with the error errs[id]; Ready waits
// for its ctx and reports what it saw.
type classedWorker struct {
	*apitest.Worker
	errs     map[string]error
	deadline chan bool // Ready: whether its ctx had a deadline
}

func (w *classedWorker) Sandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	if err, ok := w.errs[id]; ok {
		return worker.SandboxStatus{}, err
	}
	return w.Worker.Sandbox(ctx, id)
}

func (w *classedWorker) Ready(ctx context.Context) error {
	_, ok := ctx.Deadline()
	<-ctx.Done()
	w.deadline <- ok
	return ctx.Err()
}

// Every errdefs class survives the wire exactly, with the public message
// and details; an internal cause never crosses it.
func TestErrorClassesSurvive(t *testing.T) {
	const secret = "/var/lib/space/vol/sandboxes/sbx_x/vm/qmp.sock: console tail: password=hunter2"
	cause := errors.New(secret)
	w := &classedWorker{Worker: apitest.NewWorker(t), errs: map[string]error{}, deadline: make(chan bool, 1)}
	classes := []*errdefs.Class{
		errdefs.ErrInvalidArgument, errdefs.ErrUnauthenticated, errdefs.ErrPermissionDenied, errdefs.ErrNotFound,
		errdefs.ErrConflict, errdefs.ErrFailedPrecondition, errdefs.ErrPayloadTooLarge, errdefs.ErrResourceExhausted,
		errdefs.ErrInternal, errdefs.ErrUnavailable, errdefs.ErrAborted, errdefs.ErrDataLoss,
		errdefs.ErrDeadlineExceeded, errdefs.ErrCancelled,
	}
	type want struct {
		class   *errdefs.Class
		message string
		details map[string]any
	}
	wants := map[string]want{}
	for _, c := range classes {
		pub := "sbx_pub_" + c.Code()
		w.errs[pub] = errdefs.New(c, "sandbox is %s", c.Code()).
			WithDetails(map[string]any{"state": "suspended", "n": 3}).WithCause(cause)
		wants[pub] = want{c, "sandbox is " + c.Code(), map[string]any{"state": "suspended", "n": float64(3)}}
		bare := "sbx_bare_" + c.Code()
		w.errs[bare] = fmt.Errorf("%s: %w", secret, c)
		wants[bare] = want{c, c.Message(), nil}
	}
	w.errs["sbx_unclassed"] = cause
	wants["sbx_unclassed"] = want{errdefs.ErrInternal, errdefs.ErrInternal.Message(), nil}
	w.errs["sbx_ctx"] = fmt.Errorf("waiting: %w", context.DeadlineExceeded)
	wants["sbx_ctx"] = want{errdefs.ErrDeadlineExceeded, errdefs.ErrDeadlineExceeded.Message(), nil}

	tok := newToken(t)
	s := serve(t, w, tok)
	c := s.client(t, tok)
	ctx := timeout(t, time.Minute)
	for id, wt := range wants {
		_, err := c.Sandbox(ctx, id)
		var pub *errdefs.Public
		if !errors.As(err, &pub) {
			t.Errorf("%s: %v is not a public error", id, err)
			continue
		}
		if errdefs.ClassOf(err) != wt.class || pub.Message != wt.message || !reflect.DeepEqual(pub.Details, wt.details) {
			t.Errorf("%s: class %s, message %q, details %v; want %s, %q, %v",
				id, errdefs.ClassOf(err), pub.Message, pub.Details, wt.class, wt.message, wt.details)
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(fmt.Sprintf("%+v", err), "qmp.sock") {
			t.Errorf("%s: the cause crossed the wire: %v", id, err)
		}
		if c, _, _ := errdefs.Render(err); c != wt.class {
			t.Errorf("%s: rendered as %s", id, c)
		}
	}
	// The server logged the internal causes, for its operator.
	if !strings.Contains(s.log.String(), "hunter2") {
		t.Error("the server did not log an internal error's cause")
	}
}

// A call's deadline reaches the worker, and the caller gets
// deadline_exceeded when it passes.
func TestDeadlinePropagates(t *testing.T) {
	w := &classedWorker{Worker: apitest.NewWorker(t), deadline: make(chan bool, 1)}
	tok := newToken(t)
	c := serve(t, w, tok).client(t, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := c.Ready(ctx)
	if errdefs.ClassOf(err) != errdefs.ErrDeadlineExceeded {
		t.Errorf("Ready past its deadline: %v", err)
	}
	select {
	case had := <-w.deadline:
		if !had {
			t.Error("the worker's ctx had no deadline")
		}
	case <-time.After(time.Minute):
		t.Fatal("the worker's call never ended: its ctx did not carry the deadline")
	}
}

// A server that cannot be reached is unavailable, not internal.
func TestUnreachableIsUnavailable(t *testing.T) {
	tok := newToken(t)
	s := serve(t, apitest.NewWorker(t), tok)
	c := s.client(t, tok)
	s.stop()
	ctx := timeout(t, time.Minute)
	if _, err := c.Sandboxes(ctx); errdefs.ClassOf(err) != errdefs.ErrUnavailable {
		t.Errorf("Sandboxes of a stopped server: %v", err)
	}
}

// Exits cross the wire with their class and public words; an exit made
// before anyone watches waits for the first watcher.
func TestExits(t *testing.T) {
	fw := apitest.NewWorker(t)
	tok := newToken(t)
	s := serve(t, fw, tok)
	fw.Exit("sbx_early", errdefs.New(errdefs.ErrResourceExhausted, "out of memory").WithCause(errors.New("console: oom-killer")))
	c := s.client(t, tok)
	exits := c.Exits()
	fw.Exit("sbx_late", errors.New("qemu: exit status 1"))
	for _, want := range []struct {
		id    string
		class *errdefs.Class
		msg   string
	}{{"sbx_early", errdefs.ErrResourceExhausted, "out of memory"}, {"sbx_late", errdefs.ErrInternal, "internal error"}} {
		select {
		case ex := <-exits:
			if ex.SandboxID != want.id || errdefs.ClassOf(ex.Err) != want.class || ex.Err.Error() != want.msg {
				t.Errorf("exit %s: %v (%s), want %s %s: %s", ex.SandboxID, ex.Err, errdefs.ClassOf(ex.Err), want.id, want.class, want.msg)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no exit of %s", want.id)
		}
	}
}
