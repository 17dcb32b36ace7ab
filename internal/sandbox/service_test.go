package sandbox

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/sqlite"
	"github.com/space-sandbox/space/internal/worker"
)

// domain is a Service over a real SQLite store and operation engine with
// the API tests' worker (a real agent per sandbox, no VM). No HTTP.
type domain struct {
	t      *testing.T
	svc    *Service
	store  store.Store
	ops    *operation.Engine
	worker *apitest.Worker
	tenant string
}

func newDomain(t *testing.T) *domain {
	t.Helper()
	return newDomainConfig(t, Config{})
}

func newDomainConfig(t *testing.T, cfg Config) *domain { return newDomainWith(t, cfg, nil) }

// newDomainWith is newDomainConfig with the service's worker wrapped by
// wrap (when set) around the API tests' worker.
func newDomainWith(t *testing.T, cfg Config, wrap func(*apitest.Worker) worker.Worker) *domain {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	eng := operation.New(operation.Config{Store: st, Logger: log})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		eng.Close(ctx)
	})
	fw := apitest.NewWorker(t)
	var w worker.Worker = fw
	if wrap != nil {
		w = wrap(fw)
	}
	svc, err := New(cfg, Deps{Store: st, Ops: eng, Worker: w, Logger: log, Templates: TemplateDeps{LogDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	for typ, h := range svc.Handlers() {
		eng.Register(typ, h)
	}
	tn := &store.Tenant{ID: store.NewID(store.PrefixTenant), Name: "t", CreatedAt: time.Now()}
	if err := st.CreateTenant(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	return &domain{t: t, svc: svc, store: st, ops: eng, worker: fw, tenant: tn.ID}
}

// create submits a create as the API does and waits for it.
func (d *domain) create() *store.Sandbox {
	d.t.Helper()
	now := time.Now().UTC()
	sb := &store.Sandbox{ID: store.NewID(store.PrefixSandbox), TenantID: d.tenant, Template: "base", State: store.SandboxCreating,
		VCPUs: 1, MemoryMiB: 256, Worker: "local", Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now, LastActivityAt: now}
	op, err := d.ops.Submit(context.Background(), &store.Operation{TenantID: d.tenant, Type: store.OpCreate, Target: sb.ID},
		func(ctx context.Context, tx store.Store) error { return tx.CreateSandbox(ctx, sb) })
	if err != nil {
		d.t.Fatal(err)
	}
	d.wait(op)
	return d.get(sb.ID)
}

// wait waits, bounded, for op to succeed.
func (d *domain) wait(op *store.Operation) *store.Operation {
	d.t.Helper()
	done := d.waitEnded(op)
	if done.State != store.OpSucceeded {
		d.t.Fatalf("%s operation ended %s: %+v", done.Type, done.State, done.Error)
	}
	return done
}

// waitEnded waits, bounded, for op to end, however it ends.
func (d *domain) waitEnded(op *store.Operation) *store.Operation {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done, err := d.ops.Wait(ctx, d.tenant, op.ID, 30*time.Second)
	if err != nil {
		d.t.Fatal(err)
	}
	return done
}

func (d *domain) get(id string) *store.Sandbox {
	d.t.Helper()
	sb, err := d.store.GetSandbox(context.Background(), d.tenant, id)
	if err != nil {
		d.t.Fatal(err)
	}
	return sb
}

// TestLifecycleFollowsTheTable walks a sandbox along the table's rows and
// checks each operation's domain result and the state it leaves.
func TestLifecycleFollowsTheTable(t *testing.T) {
	d := newDomain(t)
	ctx := context.Background()
	sb := d.create()
	if sb.State != RuleOf(Create).To {
		t.Fatalf("after create: %s, want %s", sb.State, RuleOf(Create).To)
	}
	for _, step := range []struct {
		verb Verb
		typ  store.OperationType
	}{{Pause, store.OpPause}, {Suspend, store.OpSuspend}, {Wake, store.OpWake}} {
		r := RuleOf(step.verb)
		op, err := d.svc.SubmitOn(ctx, sb, step.typ, r.From, nil)
		if err != nil {
			t.Fatalf("%s: %v", step.verb, err)
		}
		var got Status // the domain result, as the engine recorded it unconverted
		done := d.wait(op)
		if err := json.Unmarshal(done.Result, &got); err != nil {
			t.Fatalf("%s result %s: %v", step.verb, done.Result, err)
		}
		if got.Sandbox == nil || got.Sandbox.State != r.To || got.Worker == nil {
			t.Fatalf("%s result %s: want the sandbox %s with the worker's status", step.verb, done.Result, r.To)
		}
		sb = d.get(sb.ID)
		if sb.State != r.To {
			t.Fatalf("after %s: %s, want %s", step.verb, sb.State, r.To)
		}
	}
	// Pause again from running is fine; a second pause from paused is a
	// conflict that names the state, before any operation runs.
	op, err := d.svc.SubmitOn(ctx, sb, store.OpPause, RuleOf(Pause).From, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.wait(op)
	_, err = d.svc.SubmitOn(ctx, d.get(sb.ID), store.OpPause, RuleOf(Pause).From, nil)
	if errdefs.ClassOf(err) != errdefs.ErrConflict {
		t.Fatalf("pause of a paused sandbox: %v, want a conflict", err)
	}
	op, err = d.svc.SubmitDelete(ctx, d.tenant, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	d.wait(op)
	if got := d.get(sb.ID).State; got != store.SandboxDeleted {
		t.Fatalf("after delete: %s", got)
	}
	if _, err := d.worker.Sandbox(ctx, sb.ID); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Fatalf("worker still has the deleted sandbox: %v", err)
	}
}

// TestReconcile: a create a restart interrupted fails, and a VM the store
// does not know is deleted from the worker.
func TestReconcile(t *testing.T) {
	d := newDomain(t)
	ctx := context.Background()
	now := time.Now().UTC()
	stuck := &store.Sandbox{ID: store.NewID(store.PrefixSandbox), TenantID: d.tenant, Template: "base", State: store.SandboxCreating,
		VCPUs: 1, MemoryMiB: 256, Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now, LastActivityAt: now}
	if err := d.store.CreateSandbox(ctx, stuck); err != nil {
		t.Fatal(err)
	}
	orphan := store.NewID(store.PrefixSandbox)
	if _, err := d.worker.CreateSandbox(ctx, worker.SandboxSpec{ID: orphan, Template: "base", VCPUs: 1, MemoryMiB: 256}); err != nil {
		t.Fatal(err)
	}
	if err := d.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	got := d.get(stuck.ID)
	if got.State != store.SandboxFailed || got.LastError == nil || got.LastError.Code != errdefs.ErrAborted.Code() {
		t.Fatalf("interrupted create: %s %+v, want failed with code aborted", got.State, got.LastError)
	}
	if _, err := d.worker.Sandbox(ctx, orphan); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Fatalf("orphan VM survived reconcile: %v", err)
	}
}

// TestCommandSession: a command starts once in the guest, its exit is
// recorded by the first writer, and a delete ends what is left.
func TestCommandSession(t *testing.T) {
	d := newDomain(t)
	ctx := context.Background()
	sb := d.create()
	spec, _ := json.Marshal(agentproto.ProcessSpec{Argv: []string{"sleep", "30"}})
	c := &store.Command{ID: store.NewID(store.PrefixCommand), TenantID: d.tenant, SandboxID: sb.ID, Spec: spec,
		State: store.CommandCreated, CreatedAt: time.Now().UTC()}
	if err := d.store.CreateCommand(ctx, c); err != nil {
		t.Fatal(err)
	}
	started, _, err := d.svc.EnsureStarted(ctx, sb, c)
	if err != nil {
		t.Fatal(err)
	}
	if started.State != store.CommandRunning || started.StartedAt == nil {
		t.Fatalf("after start: %s started %v", started.State, started.StartedAt)
	}
	again, _, err := d.svc.EnsureStarted(ctx, sb, c) // c is the stale, created copy
	if err != nil || again.State != store.CommandRunning || again.PID != started.PID {
		t.Fatalf("second start: %v %+v, want the same running command", err, again)
	}
	code := 3
	d.svc.RecordExit(ctx, c.ID, &agentproto.ExitStatus{ExitCode: &code, Reason: agentproto.ReasonExited, EndedAt: time.Now()}, 7)
	d.svc.RecordExit(ctx, c.ID, &agentproto.ExitStatus{Reason: agentproto.ReasonLost, EndedAt: time.Now()}, 9)
	cur, err := d.store.GetCommand(ctx, d.tenant, sb.ID, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	ex, ok := DecodeExit(cur)
	if !ok || ex.Reason != agentproto.ReasonExited || ex.ExitCode == nil || *ex.ExitCode != 3 || ex.Seq != 7 {
		t.Fatalf("stored exit %+v (ok %v), want the first: exited 3 at seq 7", ex, ok)
	}
	// A command never started ends with the sandbox's delete.
	spec2, _ := json.Marshal(agentproto.ProcessSpec{Argv: []string{"true"}})
	c2 := &store.Command{ID: store.NewID(store.PrefixCommand), TenantID: d.tenant, SandboxID: sb.ID, Spec: spec2,
		State: store.CommandCreated, CreatedAt: time.Now().UTC()}
	if err := d.store.CreateCommand(ctx, c2); err != nil {
		t.Fatal(err)
	}
	op, err := d.svc.SubmitDelete(ctx, d.tenant, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	d.wait(op)
	cur, err = d.store.GetCommand(ctx, d.tenant, sb.ID, c2.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ex, ok := DecodeExit(cur); !ok || cur.State != store.CommandExited || ex.Reason != agentproto.ReasonSandboxDeleted {
		t.Fatalf("unstarted command after delete: %s %+v", cur.State, ex)
	}
}
