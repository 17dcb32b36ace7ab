package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// mkTargetOp creates an operation on target, claimed by owner.
func mkTargetOp(t *testing.T, s store.Store, tenant, target, owner string) *store.Operation {
	t.Helper()
	op := &store.Operation{TenantID: tenant, Type: store.OpPause, Target: target}
	must(t, s.CreateOperation(ctxT(t), op))
	claimed, err := s.ClaimOperation(ctxT(t), op.ID, owner, time.Hour)
	must(t, err)
	return claimed
}

func testStartOperation(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "start")
	first := mkTargetOp(t, s, a.ID, "sbx_start", "a")
	second := mkTargetOp(t, s, a.ID, "sbx_start", "b")
	other := mkTargetOp(t, s, a.ID, "sbx_other", "b")

	// Only the lease's owner starts it.
	_, _, err := s.StartOperation(ctx, first.ID, "b")
	wantClass(t, err, errdefs.ErrConflict)
	started, holder, err := s.StartOperation(ctx, first.ID, "a")
	must(t, err)
	if holder != nil || started == nil || started.State != store.OpRunning || started.LeaseOwner != "a" {
		t.Fatalf("start of a free target = %+v, holder %+v", started, holder)
	}
	// A second operation on the target waits for the first; one on
	// another target does not.
	started, holder, err = s.StartOperation(ctx, second.ID, "b")
	must(t, err)
	if started != nil || holder == nil || holder.ID != first.ID || holder.State != store.OpRunning {
		t.Fatalf("start while the target's first operation runs = %+v, holder %+v", started, holder)
	}
	if cur, err := s.GetOperation(ctx, a.ID, second.ID); err != nil || cur.State != store.OpPending {
		t.Fatalf("a start that waits changed the operation: %+v, %v", cur, err)
	}
	if started, holder, err = s.StartOperation(ctx, other.ID, "b"); err != nil || holder != nil || started.State != store.OpRunning {
		t.Fatalf("start on another target = %+v, holder %+v, %v", started, holder, err)
	}
	// Started once: not again.
	_, _, err = s.StartOperation(ctx, first.ID, "a")
	wantClass(t, err, errdefs.ErrConflict)
	// Once the first ends, the second starts.
	_, err = s.TransitionOperation(ctx, first.ID, nil, store.OpSucceeded, nil)
	must(t, err)
	if started, holder, err = s.StartOperation(ctx, second.ID, "b"); err != nil || holder != nil || started.State != store.OpRunning {
		t.Fatalf("start after the holder ended = %+v, holder %+v, %v", started, holder, err)
	}
	_, _, err = s.StartOperation(ctx, "op_nope", "a")
	wantClass(t, err, errdefs.ErrNotFound)
}

// testStartOperationRace starts many operations of one target at once, as
// many replicas would: exactly one runs, every other is told which.
func testStartOperationRace(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "startrace")
	const n = 8
	ops := make([]*store.Operation, n)
	for i := range ops {
		ops[i] = mkTargetOp(t, s, a.ID, "sbx_race", "r"+string(rune('a'+i)))
	}
	type result struct {
		started, holder *store.Operation
		err             error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i, op := range ops {
		wg.Go(func() {
			<-gate
			st, h, err := s.StartOperation(ctx, op.ID, op.LeaseOwner)
			results[i] = result{st, h, err}
		})
	}
	close(gate)
	wg.Wait()
	var winner string
	for i, r := range results {
		must(t, r.err)
		if r.started != nil {
			if winner != "" {
				t.Fatalf("two operations of one target started: %s and %s", winner, r.started.ID)
			}
			winner = r.started.ID
		} else if r.holder == nil {
			t.Fatalf("start %d neither started nor named a holder", i)
		}
	}
	if winner == "" {
		t.Fatal("no operation of the target started")
	}
	for i, r := range results {
		if r.holder != nil && r.holder.ID != winner {
			t.Fatalf("start %d was held by %s, but %s started", i, r.holder.ID, winner)
		}
	}
}
