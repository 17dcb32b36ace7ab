package operation_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store"
)

func TestCancelPending(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(4)
	g := newGate()
	eng.Register(store.OpWake, g.handler)
	first := e.submit(eng, store.OpWake, "sbx_c")
	<-g.started
	second := e.submit(eng, store.OpWake, "sbx_c")
	got, err := eng.Cancel(e.ctx, e.tenant, second.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.OpCancelled || got.DoneAt == nil || got.Error == nil || got.Error.Code != "cancelled" {
		t.Fatalf("cancelled pending op %+v", got)
	}
	close(g.release)
	if done := e.wait(eng, first.ID); done.State != store.OpSucceeded {
		t.Fatalf("first op %s", done.State)
	}
	if done := e.wait(eng, second.ID); done.State != store.OpCancelled {
		t.Fatalf("second op %s", done.State)
	}
	select {
	case id := <-g.started:
		t.Fatalf("cancelled op %s ran", id)
	default:
	}
	// Cancel of a finished op changes nothing; another tenant's is not found.
	got, err = eng.Cancel(e.ctx, e.tenant, first.ID)
	if err != nil || got.State != store.OpSucceeded {
		t.Fatalf("cancel finished: %+v %v", got, err)
	}
	_, err = eng.Cancel(e.ctx, "ten_other", first.ID)
	if errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Fatalf("cancel of another tenant's op: %v", err)
	}
}

func TestCancelRunning(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(4)
	g := newGate()
	eng.Register(store.OpCheckpoint, g.handler)
	op := e.submit(eng, store.OpCheckpoint, "sbx_r")
	<-g.started
	if _, err := eng.Cancel(e.ctx, e.tenant, op.ID); err != nil {
		t.Fatal(err)
	}
	done := e.wait(eng, op.ID)
	if done.State != store.OpCancelled || done.Error == nil || done.Error.Code != "cancelled" {
		t.Fatalf("cancelled running op %+v", done)
	}
}

func TestWait(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(4)
	g := newGate()
	eng.Register(store.OpRestore, g.handler)
	op := e.submit(eng, store.OpRestore, "sbx_w")
	<-g.started

	// The wait runs out: the op comes back unfinished.
	got, err := eng.Wait(e.ctx, e.tenant, op.ID, 20*time.Millisecond)
	if err != nil || got.State != store.OpRunning {
		t.Fatalf("timed-out wait: %+v %v", got, err)
	}
	// The caller's context ends the wait.
	cctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := eng.Wait(cctx, e.tenant, op.ID, long); errdefs.ClassOf(err) != errdefs.ErrCancelled {
		t.Fatalf("wait with a cancelled context: %v", err)
	}
	if _, err := eng.Wait(e.ctx, "ten_other", op.ID, long); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Fatalf("wait on another tenant's op: %v", err)
	}
	// Waiters are woken by the finish, long before their timeout.
	results := make(chan *store.Operation, 3)
	for range 3 {
		go func() {
			op, err := eng.Wait(e.ctx, e.tenant, op.ID, long)
			if err != nil {
				t.Error(err)
			}
			results <- op
		}()
	}
	close(g.release)
	for range 3 {
		if got := <-results; got == nil || got.State != store.OpSucceeded {
			t.Fatalf("woken waiter got %+v", got)
		}
	}
}

func TestRecoverAfterCrash(t *testing.T) {
	e := newEnv(t)
	// The first engine "crashes": its handler never finishes and it is
	// never closed before the second engine starts.
	crashed := operation.New(operation.Config{Store: e.store})
	g := newGate()
	crashed.Register(store.OpCreate, g.handler)
	running := e.submit(crashed, store.OpCreate, "sbx_1")
	<-g.started
	pending := e.submit(crashed, store.OpCreate, "sbx_1")

	reg := prometheus.NewRegistry()
	eng := operation.New(operation.Config{Store: e.store, Registerer: reg})
	t.Cleanup(func() { eng.Close(context.Background()) })
	ended, err := eng.Recover(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ended) != 2 || ended[0].ID != running.ID || ended[1].ID != pending.ID {
		t.Fatalf("Recover ended %v, want both", ended)
	}
	for _, op := range ended {
		got, err := eng.Wait(e.ctx, e.tenant, op.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != store.OpFailed || got.Error == nil || got.Error.Code != "aborted" ||
			got.Error.Message != "interrupted by a server restart" || got.DoneAt == nil {
			t.Fatalf("recovered op %+v error %+v", got, got.Error)
		}
	}
	if left, _ := e.store.ListUnfinishedOperations(e.ctx); len(left) != 0 {
		t.Fatalf("%d operations still unfinished", len(left))
	}
	if n := counter(t, reg, "space_operations_finished_total", "failed"); n != 2 {
		t.Fatalf("finished{failed} = %v, want 2", n)
	}
	// The crashed engine's late finish must not overwrite the verdict.
	close(g.release)
	if err := crashed.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := e.store.GetOperation(e.ctx, e.tenant, running.ID)
	if got.State != store.OpFailed {
		t.Fatalf("late finish changed the recovered op to %s", got.State)
	}
	// Recover again finds nothing.
	if again, err := eng.Recover(e.ctx); err != nil || len(again) != 0 {
		t.Fatalf("second Recover: %v %v", again, err)
	}
}

func TestCloseLeavesQueuedPending(t *testing.T) {
	e := newEnv(t)
	eng := operation.New(operation.Config{Store: e.store, Concurrency: 1})
	g := newGate()
	eng.Register(store.OpDelete, g.handler)
	running := e.submit(eng, store.OpDelete, "sbx_1")
	<-g.started
	queued := e.submit(eng, store.OpDelete, "sbx_2")
	// Close gives the running handler until ctx ends, then cancels it.
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if err := eng.Close(ctx); errdefs.ClassOf(err) != errdefs.ErrDeadlineExceeded {
		t.Fatalf("Close past its deadline: %v", err)
	}
	if err := eng.Close(e.ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	got, _ := e.store.GetOperation(e.ctx, e.tenant, running.ID)
	if got.State != store.OpFailed || got.Error.Code != "aborted" {
		t.Fatalf("op interrupted by shutdown: %s %+v", got.State, got.Error)
	}
	got, _ = e.store.GetOperation(e.ctx, e.tenant, queued.ID)
	if got.State != store.OpPending {
		t.Fatalf("queued op %s after Close, want pending", got.State)
	}
	if _, err := eng.Submit(e.ctx, &store.Operation{TenantID: e.tenant, Type: store.OpDelete, Target: "sbx_3"}, nil); errdefs.ClassOf(err) != errdefs.ErrUnavailable {
		t.Fatalf("Submit after Close: %v", err)
	}
	next := operation.New(operation.Config{Store: e.store})
	t.Cleanup(func() { next.Close(context.Background()) })
	ended, err := next.Recover(e.ctx)
	if err != nil || len(ended) != 1 || ended[0].ID != queued.ID {
		t.Fatalf("Recover after Close: %v %v", ended, err)
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	eng := operation.New(operation.Config{Store: e.store, Registerer: reg})
	t.Cleanup(func() { eng.Close(context.Background()) })
	eng.Register(store.OpPause, func(context.Context, *store.Operation, operation.ProgressFunc) (any, error) { return nil, nil })
	e.wait(eng, e.submit(eng, store.OpPause, "sbx_m").ID)
	if n := counter(t, reg, "space_operations_finished_total", "succeeded"); n != 1 {
		t.Fatalf("finished{succeeded} = %v, want 1", n)
	}
	if n := counter(t, reg, "space_operations_submitted_total", ""); n != 1 {
		t.Fatalf("submitted = %v, want 1", n)
	}
}

// counter sums a counter family's samples whose outcome label is outcome
// (any when empty).
func counter(t *testing.T, reg *prometheus.Registry, name, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := outcome == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					match = true
				}
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
