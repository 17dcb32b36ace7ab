package sandbox

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// storeOutageWorker is the API tests' worker whose wakes and status reads
// fail unavailable while down is set, as a cluster's do while the object
// store holding suspended sandboxes is unreachable.
type storeOutageWorker struct {
	*apitest.Worker
	down atomic.Bool
}

func (w *storeOutageWorker) WakeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	if w.down.Load() {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrUnavailable, "could not fetch the sandbox's snapshot from object storage")
	}
	return w.Worker.WakeSandbox(ctx, id)
}

func (w *storeOutageWorker) Sandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	if w.down.Load() {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrUnavailable, "object store unreachable")
	}
	return w.Worker.Sandbox(ctx, id)
}

// A wake that fails because the worker cannot reach what the sandbox is
// kept in, and cannot even say how the sandbox stands, leaves it in the
// state it had (suspended), not failed; it wakes once the outage is over.
func TestWakeDuringOutageStaysSuspended(t *testing.T) {
	var w *storeOutageWorker
	d := newDomainWith(t, Config{}, func(fw *apitest.Worker) worker.Worker {
		w = &storeOutageWorker{Worker: fw}
		return w
	})
	ctx := context.Background()
	sb := d.create()
	op, err := d.svc.SubmitOn(ctx, sb, store.OpSuspend, RuleOf(Suspend).From, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.wait(op)
	w.down.Store(true)
	op, err = d.svc.SubmitOn(ctx, d.get(sb.ID), store.OpWake, RuleOf(Wake).From, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done, err := d.ops.Wait(wctx, d.tenant, op.ID, 30*time.Second)
	if err != nil || done.State != store.OpFailed || done.Error == nil || done.Error.Code != errdefs.ErrUnavailable.Code() {
		t.Fatalf("wake during the outage: %+v, %v; want failed unavailable", done, err)
	}
	if got := d.get(sb.ID); got.State != store.SandboxSuspended || got.LastError != nil {
		t.Fatalf("after the failed wake the sandbox is %s (%+v), want suspended", got.State, got.LastError)
	}
	w.down.Store(false)
	op, err = d.svc.SubmitOn(ctx, d.get(sb.ID), store.OpWake, RuleOf(Wake).From, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.wait(op)
	if got := d.get(sb.ID); got.State != store.SandboxRunning {
		t.Fatalf("after the outage the wake left %s", got.State)
	}
}
