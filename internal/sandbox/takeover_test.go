package sandbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/testenv"
)

// ReconcileLive fails a running sandbox whose VM vanished without an exit,
// and leaves alone the live ones and those in a transition.
func TestReconcileLive(t *testing.T) {
	d := newDomain(t)
	ctx := context.Background()
	kept, gone, moving := d.create(), d.create(), d.create()
	for _, id := range []string{gone.ID, moving.ID} {
		if err := d.worker.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.store.TransitionSandbox(ctx, store.AnyTenant, moving.ID, nil, store.SandboxPausing, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.svc.ReconcileLive(ctx); err != nil {
		t.Fatal(err)
	}
	if sb := d.get(kept.ID); sb.State != store.SandboxRunning {
		t.Errorf("sandbox with its VM: %s", sb.State)
	}
	if sb := d.get(gone.ID); sb.State != store.SandboxFailed || sb.LastError == nil || sb.LastError.Code != "unavailable" {
		t.Errorf("sandbox without its VM: %s %+v", sb.State, sb.LastError)
	}
	if sb := d.get(moving.ID); sb.State != store.SandboxPausing {
		t.Errorf("sandbox in a transition: %s, want it left pausing", sb.State)
	}
}

// ReconcileTakenOver makes the target of an operation a lost replica held
// true: a create left creating fails and its VM goes; a pause left pausing
// takes the worker's state.
func TestReconcileTakenOver(t *testing.T) {
	d := newDomain(t)
	ctx := context.Background()
	creating, pausing := d.create(), d.create()
	for id, st := range map[string]store.SandboxState{creating.ID: store.SandboxCreating, pausing.ID: store.SandboxPausing} {
		if _, err := d.store.TransitionSandbox(ctx, store.AnyTenant, id, nil, st, nil); err != nil {
			t.Fatal(err)
		}
	}
	d.svc.ReconcileTakenOver(ctx, []*store.Operation{
		{ID: "op_create", Type: store.OpCreate, Target: creating.ID},
		{ID: "op_pause", Type: store.OpPause, Target: pausing.ID},
	})
	if sb := d.get(creating.ID); sb.State != store.SandboxFailed || sb.LastError == nil || sb.LastError.Code != "aborted" {
		t.Errorf("interrupted create: %s %+v", sb.State, sb.LastError)
	}
	if d.worker.VM(creating.ID) != nil {
		t.Error("the interrupted create's VM is still there")
	}
	if sb := d.get(pausing.ID); sb.State != store.SandboxRunning {
		t.Errorf("interrupted pause (the worker never paused it): %s, want running", sb.State)
	}
}

// An attached event stream keeps writing its sandbox's activity to the
// store, so a replica that runs idle expiry without seeing the stream (a
// cluster's leader) does not take the sandbox for idle.
func TestStreamKeepsActivityFresh(t *testing.T) {
	d := newDomainConfig(t, Config{ActivityFlush: 50 * time.Millisecond})
	sb := d.create()
	before := d.get(sb.ID).LastActivityAt
	detach := d.svc.StreamAttached(context.Background(), sb.ID)
	var seen []time.Time
	testenv.Eventually(t, 10*time.Second, func() error {
		at := d.get(sb.ID).LastActivityAt
		if len(seen) == 0 || at.After(seen[len(seen)-1]) {
			seen = append(seen, at)
		}
		if len(seen) < 3 || !seen[0].After(before) {
			return fmt.Errorf("last_activity_at advanced %d times while the stream is attached", len(seen)-1)
		}
		return nil
	})
	detach()
	detach() // safe twice
	if _, idle := d.svc.idleSince(d.get(sb.ID)); !idle {
		t.Fatal("the stream still counts after detach")
	}
}
