package operation_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/sqlite"
)

// long is a wait that only ends early by notification; tests never rely on
// it running out.
const long = time.Minute

type env struct {
	t      *testing.T
	ctx    context.Context
	store  store.Store
	tenant string
}

func newEnv(t *testing.T) *env {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tn := &store.Tenant{Name: "t"}
	if err := s.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, store: s, tenant: tn.ID}
}

func (e *env) engine(concurrency int) *operation.Engine {
	eng := operation.New(operation.Config{Store: e.store, Concurrency: concurrency})
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Close(ctx)
	})
	return eng
}

func (e *env) submit(eng *operation.Engine, typ store.OperationType, target string) *store.Operation {
	e.t.Helper()
	op, err := eng.Submit(e.ctx, &store.Operation{TenantID: e.tenant, Type: typ, Target: target}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return op
}

func (e *env) wait(eng *operation.Engine, id string) *store.Operation {
	e.t.Helper()
	op, err := eng.Wait(e.ctx, e.tenant, id, long)
	if err != nil {
		e.t.Fatal(err)
	}
	if !op.State.Terminal() {
		e.t.Fatalf("operation %s still %s after Wait", id, op.State)
	}
	return op
}

// gate is a handler that signals when it starts and returns when released.
type gate struct {
	started chan string
	release chan struct{}
}

func newGate() *gate { return &gate{started: make(chan string, 16), release: make(chan struct{})} }

func (g *gate) handler(ctx context.Context, op *store.Operation, _ operation.ProgressFunc) (any, error) {
	g.started <- op.ID
	select {
	case <-g.release:
		return map[string]string{"done": op.ID}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestSubmitRunsHandler(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(4)
	reported := make(chan struct{})
	proceed := make(chan struct{})
	eng.Register(store.OpCreate, func(ctx context.Context, op *store.Operation, report operation.ProgressFunc) (any, error) {
		if string(op.Params) != `{"n":1}` {
			return nil, fmt.Errorf("params %s: %w", op.Params, errdefs.ErrInvalidArgument)
		}
		report(ctx, "boot", 150) // clamped to 100
		close(reported)
		<-proceed
		return map[string]any{"sandbox": op.Target}, nil
	})
	var sbID string
	op, err := eng.Submit(e.ctx, &store.Operation{TenantID: e.tenant, Type: store.OpCreate, Params: json.RawMessage(`{"n":1}`)},
		func(ctx context.Context, tx store.Store) error {
			sb := &store.Sandbox{TenantID: e.tenant, Template: "base", State: store.SandboxCreating}
			if err := tx.CreateSandbox(ctx, sb); err != nil {
				return err
			}
			sbID = sb.ID
			return nil
		})
	if err == nil {
		t.Fatal("Submit without a target succeeded")
	}
	op, err = eng.Submit(e.ctx, &store.Operation{TenantID: e.tenant, Type: store.OpCreate, Target: "sbx_x", Params: json.RawMessage(`{"n":1}`)},
		func(ctx context.Context, tx store.Store) error {
			sb := &store.Sandbox{TenantID: e.tenant, Template: "base", State: store.SandboxCreating}
			err := tx.CreateSandbox(ctx, sb)
			sbID = sb.ID
			return err
		})
	if err != nil {
		t.Fatal(err)
	}
	if op.State != store.OpPending || !store.HasPrefix(op.ID, store.PrefixOperation) {
		t.Fatalf("submitted %+v", op)
	}
	if _, err := e.store.GetSandbox(e.ctx, e.tenant, sbID); err != nil {
		t.Fatalf("sandbox created with the operation: %v", err)
	}
	<-reported
	cur, err := e.store.GetOperation(e.ctx, e.tenant, op.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cur.State != store.OpRunning || cur.Progress == nil || cur.Progress.Step != "boot" || cur.Progress.Percent != 100 {
		t.Fatalf("running op %+v progress %+v", cur, cur.Progress)
	}
	close(proceed)
	done := e.wait(eng, op.ID)
	if done.State != store.OpSucceeded || string(done.Result) != `{"sandbox":"sbx_x"}` || done.DoneAt == nil || done.Error != nil {
		t.Fatalf("done %+v", done)
	}
}

func TestSubmitRollsBack(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(1)
	called := make(chan struct{}, 1)
	eng.Register(store.OpCreate, func(context.Context, *store.Operation, operation.ProgressFunc) (any, error) {
		called <- struct{}{}
		return nil, nil
	})
	_, err := eng.Submit(e.ctx, &store.Operation{TenantID: e.tenant, Type: store.OpCreate, Target: "sbx_q"},
		func(ctx context.Context, tx store.Store) error {
			return errdefs.New(errdefs.ErrResourceExhausted, "quota")
		})
	if errdefs.ClassOf(err) != errdefs.ErrResourceExhausted {
		t.Fatalf("Submit = %v, want the callback's error", err)
	}
	page, err := e.store.ListOperations(e.ctx, store.OperationFilter{Target: "sbx_q"})
	if err != nil || len(page.Items) != 0 {
		t.Fatalf("operation persisted despite failed callback: %v %v", page.Items, err)
	}
	if _, err := eng.Submit(e.ctx, &store.Operation{TenantID: e.tenant, Type: store.OpBranch, Target: "sbx_q"}, nil); err == nil {
		t.Fatal("Submit of an unregistered type succeeded")
	}
	select {
	case <-called:
		t.Fatal("handler ran")
	default:
	}
}

func TestErrorMapping(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(4)
	for _, tc := range []struct {
		name     string
		err      error
		panicky  bool
		code     string
		message  string
		leakFree string
	}{
		{"internal cause", fmt.Errorf("mkfs /var/lib/space/x: exit 1: %w", errdefs.ErrUnavailable), false,
			"unavailable", "service unavailable, retry later", "/var/lib"},
		{"public", errdefs.New(errdefs.ErrResourceExhausted, "no capacity for 4 vCPUs").WithCause(errors.New("host /secret")), false,
			"resource_exhausted", "no capacity for 4 vCPUs", "/secret"},
		{"wrapped public", fmt.Errorf("ctx: %w", errdefs.New(errdefs.ErrConflict, "sandbox is paused")), false,
			"conflict", "sandbox is paused", ""},
		{"unclassified", errors.New("open /dev/kvm: permission denied"), false, "internal", "internal error", "/dev/kvm"},
		{"deadline", fmt.Errorf("boot: %w", context.DeadlineExceeded), false, "deadline_exceeded", "deadline exceeded", ""},
		{"panic", nil, true, "internal", "internal error", "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typ := store.OperationType("test_" + strings.ReplaceAll(tc.name, " ", "_"))
			eng.Register(typ, func(context.Context, *store.Operation, operation.ProgressFunc) (any, error) {
				if tc.panicky {
					panic("boom")
				}
				return nil, tc.err
			})
			op := e.submit(eng, typ, "sbx_"+string(typ))
			done := e.wait(eng, op.ID)
			if done.State != store.OpFailed || done.Error == nil || done.Error.Code != tc.code || done.Error.Message != tc.message {
				t.Fatalf("ended %s with %+v, want failed %s %q", done.State, done.Error, tc.code, tc.message)
			}
			if tc.leakFree != "" && strings.Contains(done.Error.Message, tc.leakFree) {
				t.Fatalf("message %q leaks %q", done.Error.Message, tc.leakFree)
			}
		})
	}
}

func TestPerTargetSerialisation(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(4)
	var mu sync.Mutex
	var events []string
	running := 0
	maxRunning := 0
	gates := map[string]chan struct{}{}
	started := make(chan string, 16)
	eng.Register(store.OpPause, func(ctx context.Context, op *store.Operation, _ operation.ProgressFunc) (any, error) {
		mu.Lock()
		events = append(events, "start "+op.ID)
		if op.Target == "sbx_a" {
			running++
			maxRunning = max(maxRunning, running)
		}
		g := gates[op.ID]
		mu.Unlock()
		started <- op.ID
		if g != nil {
			<-g
		}
		mu.Lock()
		events = append(events, "end "+op.ID)
		if op.Target == "sbx_a" {
			running--
		}
		mu.Unlock()
		return nil, nil
	})
	// Gate every op on sbx_a before submitting so each blocks until released.
	var ops []*store.Operation
	for range 3 {
		id := store.NewID(store.PrefixOperation)
		mu.Lock()
		gates[id] = make(chan struct{})
		mu.Unlock()
		op, err := eng.Submit(e.ctx, &store.Operation{ID: id, TenantID: e.tenant, Type: store.OpPause, Target: "sbx_a"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, op)
	}
	if got := <-started; got != ops[0].ID {
		t.Fatalf("first to start: %s, want %s", got, ops[0].ID)
	}
	// Another target is not held up by sbx_a.
	other := e.submit(eng, store.OpPause, "sbx_b")
	if done := e.wait(eng, other.ID); done.State != store.OpSucceeded {
		t.Fatalf("other target op %s", done.State)
	}
	<-started // sbx_b's start
	for _, op := range ops[1:] {
		cur, err := e.store.GetOperation(e.ctx, e.tenant, op.ID)
		if err != nil {
			t.Fatal(err)
		}
		if cur.State != store.OpPending {
			t.Fatalf("queued op %s is %s while the first runs", op.ID, cur.State)
		}
	}
	for i, op := range ops {
		mu.Lock()
		close(gates[op.ID])
		mu.Unlock()
		e.wait(eng, op.ID)
		if i+1 < len(ops) {
			if got := <-started; got != ops[i+1].ID {
				t.Fatalf("started %s, want %s", got, ops[i+1].ID)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if maxRunning != 1 {
		t.Fatalf("%d ops ran at once on one target", maxRunning)
	}
	var onA []string
	for _, ev := range events {
		if !strings.HasSuffix(ev, other.ID) {
			onA = append(onA, ev)
		}
	}
	want := []string{"start " + ops[0].ID, "end " + ops[0].ID, "start " + ops[1].ID, "end " + ops[1].ID, "start " + ops[2].ID, "end " + ops[2].ID}
	if strings.Join(onA, ",") != strings.Join(want, ",") {
		t.Fatalf("events %v, want %v", onA, want)
	}
}

func TestBoundedConcurrency(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(1)
	g := newGate()
	eng.Register(store.OpSuspend, g.handler)
	first := e.submit(eng, store.OpSuspend, "sbx_1")
	<-g.started
	second := e.submit(eng, store.OpSuspend, "sbx_2")
	cur, err := eng.Wait(e.ctx, e.tenant, second.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if cur.State != store.OpPending {
		t.Fatalf("second op %s while the only slot is taken", cur.State)
	}
	close(g.release)
	e.wait(eng, first.ID)
	if done := e.wait(eng, second.ID); done.State != store.OpSucceeded {
		t.Fatalf("second op ended %s", done.State)
	}
}
