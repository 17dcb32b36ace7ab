package sandbox

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// drainingWorker is the API tests' worker as a worker.Drainer: a sandbox
// marked in drains is being drained, and its drain ends as the mark says —
// suspended by the worker (the test worker's own suspend), or failed with
// the sandbox gone from the worker, as a cluster worker does when the
// drain's upload fails.
type drainingWorker struct {
	*apitest.Worker
	wake bool // WakeAfterDrain

	mu     sync.Mutex
	drains map[string]error // sandbox id -> nil (suspends) or the drain's error
}

func (w *drainingWorker) drain(id string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drains[id] = err
}

func (w *drainingWorker) Draining(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.drains[id]
	return ok
}

func (w *drainingWorker) WakeAfterDrain() bool { return w.wake }

func (w *drainingWorker) AwaitDrain(ctx context.Context, id string) (worker.SandboxStatus, error) {
	w.mu.Lock()
	derr, ok := w.drains[id]
	delete(w.drains, id)
	w.mu.Unlock()
	if !ok {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrConflict, "sandbox %s is not being drained", id)
	}
	if derr != nil {
		if err := w.DeleteSandbox(ctx, id); err != nil {
			return worker.SandboxStatus{}, err
		}
		return worker.SandboxStatus{}, derr
	}
	return w.SuspendSandbox(ctx, id)
}

func newDrainDomain(t *testing.T, wake bool) (*domain, *drainingWorker) {
	t.Helper()
	var dw *drainingWorker
	d := newDomainWith(t, Config{}, func(fw *apitest.Worker) worker.Worker {
		dw = &drainingWorker{Worker: fw, wake: wake, drains: map[string]error{}}
		return dw
	})
	return d, dw
}

// operationsOf returns sandbox id's operations of type typ, newest first.
func (d *domain) operationsOf(id string, typ store.OperationType) []*store.Operation {
	d.t.Helper()
	page, err := d.store.ListOperations(context.Background(), store.OperationFilter{TenantID: d.tenant, Target: id})
	if err != nil {
		d.t.Fatal(err)
	}
	var ops []*store.Operation
	for _, op := range page.Items {
		if op.Type == typ {
			ops = append(ops, op)
		}
	}
	return ops
}

// A drain notice for a running sandbox records one suspend operation (a
// second notice, as from another replica, records nothing more); it ends
// the sandbox suspended, and with the wake policy a wake operation then
// brings it back running.
func TestDrainSuspendsThenWakes(t *testing.T) {
	d, dw := newDrainDomain(t, true)
	ctx := context.Background()
	sb := d.create()
	dw.drain(sb.ID, nil)
	d.svc.handleExit(ctx, worker.Exit{SandboxID: sb.ID, Drain: true})
	d.svc.handleExit(ctx, worker.Exit{SandboxID: sb.ID, Drain: true})
	suspends := d.operationsOf(sb.ID, store.OpSuspend)
	if len(suspends) != 1 {
		for _, o := range suspends {
			t.Logf("%s %s %s created %s", o.ID, o.State, o.Params, o.CreatedAt.Format(time.StampMicro))
		}
		t.Fatalf("%d suspend operations recorded for two notices of one drain, want 1", len(suspends))
	}
	if done := d.wait(suspends[0]); string(done.Params) == "" {
		t.Errorf("the drain's suspend has no params")
	}
	wakes := d.operationsOf(sb.ID, store.OpWake)
	if len(wakes) != 1 {
		t.Fatalf("%d wake operations after a drain of a running sandbox with the wake policy, want 1", len(wakes))
	}
	d.wait(wakes[0])
	if got := d.get(sb.ID); got.State != store.SandboxRunning {
		t.Errorf("after the drain and its wake: %s, want running", got.State)
	}
	if vm := d.worker.VM(sb.ID); vm == nil {
		t.Error("the woken sandbox has no VM on the worker")
	}
}

// With the suspend policy a drained sandbox stays suspended; so does a
// paused one under the wake policy (a wake would run the vCPUs its tenant
// stopped).
func TestDrainLeavesSuspended(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wake   bool
		paused bool
	}{
		{"suspend policy", false, false},
		{"paused sandbox, wake policy", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, dw := newDrainDomain(t, tc.wake)
			ctx := context.Background()
			sb := d.create()
			if tc.paused {
				op, err := d.svc.SubmitOn(ctx, sb, store.OpPause, RuleOf(Pause).From, nil)
				if err != nil {
					t.Fatal(err)
				}
				d.wait(op)
			}
			dw.drain(sb.ID, nil)
			d.svc.handleExit(ctx, worker.Exit{SandboxID: sb.ID, Drain: true})
			suspends := d.operationsOf(sb.ID, store.OpSuspend)
			if len(suspends) != 1 {
				t.Fatalf("%d suspend operations, want 1", len(suspends))
			}
			d.wait(suspends[0])
			if got := d.get(sb.ID); got.State != store.SandboxSuspended {
				t.Errorf("after the drain: %s, want suspended", got.State)
			}
			if wakes := d.operationsOf(sb.ID, store.OpWake); len(wakes) != 0 {
				t.Errorf("%d wake operations submitted, want none", len(wakes))
			}
		})
	}
}

// A drain whose suspend failed fails the sandbox with the drain's error,
// in its class; a notice for a sandbox its worker is not draining records
// nothing; a drain the worker says is no drain (conflict) leaves the
// sandbox in the state its worker reports.
func TestDrainFailuresAndStaleNotices(t *testing.T) {
	d, dw := newDrainDomain(t, true)
	ctx := context.Background()

	failed := d.create()
	dw.drain(failed.ID, errdefs.New(errdefs.ErrResourceExhausted, "the node drain's suspend failed: not enough free storage"))
	d.svc.handleExit(ctx, worker.Exit{SandboxID: failed.ID, Drain: true})
	suspends := d.operationsOf(failed.ID, store.OpSuspend)
	if len(suspends) != 1 {
		t.Fatalf("%d suspend operations, want 1", len(suspends))
	}
	if done := d.waitEnded(suspends[0]); done.State != store.OpFailed || done.Error == nil || done.Error.Code != "resource_exhausted" {
		t.Errorf("the failed drain's operation: %s %+v, want failed resource_exhausted", done.State, done.Error)
	}
	if got := d.get(failed.ID); got.State != store.SandboxFailed || got.LastError == nil || got.LastError.Code != "resource_exhausted" {
		t.Errorf("sandbox after a failed drain: %s %+v, want failed resource_exhausted", got.State, got.LastError)
	}
	if wakes := d.operationsOf(failed.ID, store.OpWake); len(wakes) != 0 {
		t.Errorf("%d wake operations after a failed drain, want none", len(wakes))
	}

	stale := d.create()
	d.svc.handleExit(ctx, worker.Exit{SandboxID: stale.ID, Drain: true})
	if ops := d.operationsOf(stale.ID, store.OpSuspend); len(ops) != 0 {
		t.Errorf("a notice for a sandbox not being drained recorded %d suspends", len(ops))
	}
	if got := d.get(stale.ID); got.State != store.SandboxRunning {
		t.Errorf("sandbox after a stale notice: %s, want running", got.State)
	}

	// A drain recorded (as by another replica's notice) that its worker
	// says is none by the time it runs: conflict, and it keeps running.
	gone := d.create()
	op, err := d.svc.SubmitOnChecked(ctx, gone, store.OpSuspend, RuleOf(Suspend).From, DrainParams{Drain: true}, drainNotRecorded)
	if err != nil {
		t.Fatal(err)
	}
	if done := d.waitEnded(op); done.State != store.OpFailed || done.Error == nil || done.Error.Code != "conflict" {
		t.Errorf("a drain that was none: %s %+v, want failed conflict", done.State, done.Error)
	}
	if got := d.get(gone.ID); got.State != store.SandboxRunning {
		t.Errorf("sandbox after a drain that was none: %s, want running (its worker's state)", got.State)
	}
}

// A replica that takes over a drain of a running sandbox from a lost one
// submits the wake the lost one would have: whether it was lost in the
// middle (the sandbox suspending) or after the drain's end; never a second
// wake, and none for a sandbox that was paused when drained.
func TestDrainTakenOverStillWakes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		state      store.SandboxState // as the lost replica left it
		wasRunning bool
		wokenSince bool // a wake was submitted after the drain
		wantWake   bool
	}{
		{"lost mid-drain", store.SandboxSuspending, true, false, true},
		{"lost before the wake", store.SandboxSuspended, true, false, true},
		{"woken already", store.SandboxSuspended, true, true, false},
		{"was paused", store.SandboxSuspending, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := newDrainDomain(t, true)
			ctx := context.Background()
			sb := d.create()
			drainedAt := time.Now().UTC().Add(-time.Second)
			if _, err := d.worker.SuspendSandbox(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := d.store.TransitionSandbox(ctx, store.AnyTenant, sb.ID, nil, tc.state, nil); err != nil {
				t.Fatal(err)
			}
			if tc.wokenSince {
				op, err := d.svc.SubmitOn(ctx, d.get(sb.ID), store.OpWake, RuleOf(Wake).From, nil)
				if err != nil {
					t.Fatal(err)
				}
				d.wait(op)
			}
			params, err := json.Marshal(DrainParams{Drain: true, WasRunning: tc.wasRunning})
			if err != nil {
				t.Fatal(err)
			}
			lost := &store.Operation{ID: "op_lost_drain", TenantID: d.tenant, Type: store.OpSuspend, Target: sb.ID, Params: params, CreatedAt: drainedAt}
			if d.svc.ReconcileTakenOver(ctx, lost) {
				t.Error("take-over of a drain asks for a rerun")
			}
			wakes := d.operationsOf(sb.ID, store.OpWake)
			want := 0
			if tc.wantWake || tc.wokenSince {
				want = 1
			}
			if len(wakes) != want {
				t.Fatalf("%d wake operations after the take-over, want %d", len(wakes), want)
			}
			if want == 0 {
				if got := d.get(sb.ID); got.State != store.SandboxSuspended {
					t.Errorf("after the take-over: %s, want suspended", got.State)
				}
				return
			}
			d.wait(wakes[0])
			if got := d.get(sb.ID); got.State != store.SandboxRunning {
				t.Errorf("after the take-over's wake: %s, want running", got.State)
			}
		})
	}
}
