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
	for _, op := range []*store.Operation{
		{ID: "op_create", Type: store.OpCreate, Target: creating.ID},
		{ID: "op_pause", Type: store.OpPause, Target: pausing.ID},
	} {
		if d.svc.ReconcileTakenOver(ctx, op) {
			t.Errorf("take-over of %s asks for a rerun", op.ID)
		}
	}
	if sb := d.get(creating.ID); sb.State != store.SandboxFailed || sb.LastError == nil || sb.LastError.Code != "aborted" {
		t.Errorf("interrupted create: %s %+v", sb.State, sb.LastError)
	}
	if d.worker.VM(creating.ID) != nil {
		t.Error("the interrupted create's VM is still there")
	}
	if sb := d.get(pausing.ID); sb.State != store.SandboxRunning {
		t.Errorf("interrupted pause (the worker never paused it): %s, want running", sb.State)
	}
	// A delete is finished by running it again, not failed.
	deleting := d.create()
	if _, err := d.store.TransitionSandbox(ctx, store.AnyTenant, deleting.ID, nil, store.SandboxDeleting, nil); err != nil {
		t.Fatal(err)
	}
	del := &store.Operation{ID: "op_delete", Type: store.OpDelete, Target: deleting.ID}
	if !d.svc.ReconcileTakenOver(ctx, del) {
		t.Error("take-over of a delete does not ask for its rerun")
	}
	run := d.svc.Handlers()[store.OpDelete]
	noReport := func(context.Context, string, int) {}
	if _, err := run(ctx, del, noReport); err != nil {
		t.Fatalf("delete run again: %v", err)
	}
	if sb := d.get(deleting.ID); sb.State != store.SandboxDeleted || d.worker.VM(deleting.ID) != nil {
		t.Fatalf("after the delete's rerun: %s (VM left: %v)", sb.State, d.worker.VM(deleting.ID) != nil)
	}
	// The lost run had finished it: the rerun finds it deleted and succeeds.
	if !d.svc.ReconcileTakenOver(ctx, del) {
		t.Error("take-over of a finished delete does not ask for its rerun")
	}
	if _, err := run(ctx, del, noReport); err != nil {
		t.Fatalf("delete run again once deleted: %v", err)
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

// Activity between two writes reaches the store when the flush interval
// ends, and a sandbox with an idle timeout flushes every quarter of it:
// the replica running idle expiry reads activity another replica saw well
// before the timeout passes.
func TestActivityTrailsIntoStore(t *testing.T) {
	d := newDomain(t) // ActivityFlush: the 30s default
	ctx := context.Background()
	sb := d.create()
	if _, err := d.store.TransitionSandbox(ctx, store.AnyTenant, sb.ID, nil, "", func(s *store.Sandbox) error {
		s.IdleTimeoutSeconds = 2
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	d.svc.Touch(ctx, sb.ID) // written at once
	first := d.get(sb.ID).LastActivityAt
	d.svc.Touch(ctx, sb.ID) // within the interval: kept in memory
	d.svc.life.mu.Lock()
	second := d.svc.life.last[sb.ID]
	d.svc.life.mu.Unlock()
	if !second.After(first) {
		t.Fatalf("second touch at %v, not after the first write %v", second, first)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if at := d.get(sb.ID).LastActivityAt; !at.Equal(second) {
			return fmt.Errorf("store's last_activity_at %v, want the trailing touch %v", at, second)
		}
		return nil
	})
	if got := activityFlushFor(2, DefaultActivityFlush); got != 500*time.Millisecond {
		t.Fatalf("flush interval of a 2s idle timeout = %v, want 500ms", got)
	}
	if got := activityFlushFor(0, DefaultActivityFlush); got != DefaultActivityFlush {
		t.Fatalf("flush interval without an idle timeout = %v", got)
	}
}
