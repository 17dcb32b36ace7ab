package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// expired is a lease so short it has run out by the time the next call
// reads it; passLease waits that out (a condition on time itself, so the
// one sleep of the suite).
const expired = time.Millisecond

func passLease() { time.Sleep(20 * time.Millisecond) }

func mkOp(t *testing.T, s store.Store, tenant string) *store.Operation {
	t.Helper()
	op := &store.Operation{TenantID: tenant, Type: store.OpPause, Target: "sbx_lease"}
	must(t, s.CreateOperation(ctxT(t), op))
	return op
}

func testOperationLeases(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "lease")
	op := mkOp(t, s, a.ID)
	if op.LeaseOwner != "" || !op.LeaseExpiresAt.IsZero() {
		t.Fatalf("a new operation has a lease: %q %v", op.LeaseOwner, op.LeaseExpiresAt)
	}
	before := time.Now()
	got, err := s.ClaimOperation(ctx, op.ID, "a", time.Hour)
	must(t, err)
	if got.ID != op.ID || got.LeaseOwner != "a" || got.State != store.OpPending {
		t.Fatalf("claimed %+v", got)
	}
	// The store's clock may be another machine's: allow it a minute's skew.
	if got.LeaseExpiresAt.Before(before.Add(59*time.Minute)) || got.LeaseExpiresAt.After(before.Add(61*time.Minute)) {
		t.Fatalf("a one-hour lease expires at %v (claimed at %v)", got.LeaseExpiresAt, before)
	}
	read, err := s.GetOperation(ctx, a.ID, op.ID)
	must(t, err)
	if read.LeaseOwner != "a" || !read.LeaseExpiresAt.Equal(got.LeaseExpiresAt) {
		t.Fatalf("read back lease %q %v, want a %v", read.LeaseOwner, read.LeaseExpiresAt, got.LeaseExpiresAt)
	}
	_, err = s.ClaimOperation(ctx, op.ID, "b", time.Hour)
	wantClass(t, err, errdefs.ErrConflict)
	_, err = s.ClaimOperation(ctx, op.ID, "a", time.Hour) // one's own again
	must(t, err)

	// Transitions keep the lease; mutate cannot move it.
	moved, err := s.TransitionOperation(ctx, op.ID, []store.OperationState{store.OpPending}, store.OpRunning, func(o *store.Operation) error {
		o.LeaseOwner, o.LeaseExpiresAt = "hijack", time.Time{}
		return nil
	})
	must(t, err)
	read, err = s.GetOperation(ctx, a.ID, op.ID)
	must(t, err)
	if moved.LeaseOwner != "a" || read.LeaseOwner != "a" || read.LeaseExpiresAt.IsZero() {
		t.Fatalf("lease after a transition: returned %q, read %q %v", moved.LeaseOwner, read.LeaseOwner, read.LeaseExpiresAt)
	}

	// Finished: no claim, no renewal.
	_, err = s.TransitionOperation(ctx, op.ID, nil, store.OpSucceeded, nil)
	must(t, err)
	_, err = s.ClaimOperation(ctx, op.ID, "a", time.Hour)
	wantClass(t, err, errdefs.ErrConflict)
	var pub *errdefs.Public
	if !errors.As(err, &pub) || pub.Details["state"] != string(store.OpSucceeded) {
		t.Fatalf("claim of a finished operation: %v, want details with its state", err)
	}
	held, err := s.RenewOperationLeases(ctx, "a", []string{op.ID}, time.Hour)
	must(t, err)
	if len(held) != 0 {
		t.Fatalf("renewed a finished operation: %v", held)
	}
	_, err = s.ClaimOperation(ctx, "op_nope", "a", time.Hour)
	wantClass(t, err, errdefs.ErrNotFound)
	_, err = s.ClaimOperation(ctx, op.ID, "", time.Hour)
	wantClass(t, err, errdefs.ErrInvalidArgument)
	_, err = s.ClaimOperation(ctx, op.ID, "a", 0)
	wantClass(t, err, errdefs.ErrInvalidArgument)
}

func testOperationLeaseExpiry(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "lease")
	taken, renewed, live := mkOp(t, s, a.ID), mkOp(t, s, a.ID), mkOp(t, s, a.ID)
	for _, op := range []*store.Operation{taken, renewed} {
		_, err := s.ClaimOperation(ctx, op.ID, "a", expired)
		must(t, err)
	}
	_, err := s.ClaimOperation(ctx, live.ID, "a", time.Hour)
	must(t, err)
	passLease()

	// An expired lease is taken over; its old owner has lost it.
	got, err := s.ClaimOperation(ctx, taken.ID, "b", time.Hour)
	must(t, err)
	if got.LeaseOwner != "b" {
		t.Fatalf("taken over by %q, want b", got.LeaseOwner)
	}
	// An expired lease nobody took is its owner's still; renewed, it is live.
	held, err := s.RenewOperationLeases(ctx, "a", []string{taken.ID, renewed.ID, live.ID, "op_nope"}, time.Hour)
	must(t, err)
	slices.Sort(held)
	want := []string{renewed.ID, live.ID}
	slices.Sort(want)
	if !slices.Equal(held, want) {
		t.Fatalf("a still holds %v, want %v", held, want)
	}
	for _, op := range []*store.Operation{renewed, live} {
		_, err = s.ClaimOperation(ctx, op.ID, "b", time.Hour)
		wantClass(t, err, errdefs.ErrConflict)
	}
	_, err = s.ClaimOperation(ctx, taken.ID, "a", time.Hour)
	wantClass(t, err, errdefs.ErrConflict)
	claimed, err := s.ClaimExpiredOperations(ctx, "c", time.Hour, 10)
	must(t, err)
	if len(claimed) != 0 {
		t.Fatalf("claimed live leases: %v", opIDs(claimed))
	}
	held, err = s.RenewOperationLeases(ctx, "a", nil, time.Hour)
	if err != nil || len(held) != 0 {
		t.Fatalf("renewing nothing: %v %v", held, err)
	}
}

func testOperationClaimRace(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "lease")
	op := mkOp(t, s, a.ID)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = s.ClaimOperation(ctx, op.ID, fmt.Sprintf("r%d", i), time.Hour)
		}()
	}
	close(start)
	wg.Wait()
	winner := ""
	for i, err := range errs {
		switch {
		case err == nil && winner != "":
			t.Fatalf("both %s and r%d claimed the operation", winner, i)
		case err == nil:
			winner = fmt.Sprintf("r%d", i)
		case errdefs.ClassOf(err) != errdefs.ErrConflict:
			t.Fatalf("a losing claim failed with %v, want conflict", err)
		}
	}
	read, err := s.GetOperation(ctx, a.ID, op.ID)
	must(t, err)
	if winner == "" || read.LeaseOwner != winner {
		t.Fatalf("winner %q, stored owner %q", winner, read.LeaseOwner)
	}
}

func testClaimExpiredOperations(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "lease")
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var free []string
	mk := func(i int) *store.Operation {
		op := &store.Operation{TenantID: a.ID, Type: store.OpPause, Target: "sbx_lease", CreatedAt: base.Add(time.Duration(i) * time.Second)}
		must(t, s.CreateOperation(ctx, op))
		return op
	}
	for i := range 6 {
		op := mk(i)
		if i%2 == 1 { // an expired lease, the others none
			_, err := s.ClaimOperation(ctx, op.ID, "dead", expired)
			must(t, err)
		}
		free = append(free, op.ID)
	}
	held := mk(6)
	_, err := s.ClaimOperation(ctx, held.ID, "alive", time.Hour)
	must(t, err)
	done := mk(7)
	_, err = s.TransitionOperation(ctx, done.ID, nil, store.OpFailed, nil)
	must(t, err)
	passLease()

	one, err := s.ClaimExpiredOperations(ctx, "x", time.Hour, 1)
	must(t, err)
	if len(one) != 1 || one[0].ID != free[0] || one[0].LeaseOwner != "x" {
		t.Fatalf("limit 1 claimed %v, want the oldest %s", opIDs(one), free[0])
	}
	// Two claimers racing share the rest: each operation goes to one.
	var wg sync.WaitGroup
	got := make([][]*store.Operation, 2)
	errs := make([]error, 2)
	for i, owner := range []string{"x", "y"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.ClaimExpiredOperations(ctx, owner, time.Hour, 100)
		}()
	}
	wg.Wait()
	all := []string{}
	for i, owner := range []string{"x", "y"} {
		must(t, errs[i])
		for j, op := range got[i] {
			if op.LeaseOwner != owner || op.State != store.OpPending {
				t.Fatalf("%s claimed %+v", owner, op)
			}
			if j > 0 && !op.CreatedAt.After(got[i][j-1].CreatedAt) {
				t.Fatalf("%s's claims are not oldest first: %v", owner, opIDs(got[i]))
			}
			read, err := s.GetOperation(ctx, a.ID, op.ID)
			must(t, err)
			if read.LeaseOwner != owner {
				t.Fatalf("%s claimed %s, the store says %q", owner, op.ID, read.LeaseOwner)
			}
		}
		all = append(all, opIDs(got[i])...)
	}
	slices.Sort(all)
	want := slices.Clone(free[1:])
	slices.Sort(want)
	if !slices.Equal(all, want) {
		t.Fatalf("racing claimers got %v, want each of %v once", all, want)
	}
	again, err := s.ClaimExpiredOperations(ctx, "z", time.Hour, 100)
	must(t, err)
	if len(again) != 0 {
		t.Fatalf("claimed again: %v", opIDs(again))
	}
	_, err = s.ClaimExpiredOperations(ctx, "z", time.Hour, 0)
	wantClass(t, err, errdefs.ErrInvalidArgument)
}

func opIDs(ops []*store.Operation) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = op.ID
	}
	return out
}
