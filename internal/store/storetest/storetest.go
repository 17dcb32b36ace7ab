// Package storetest is the conformance suite of store.Store. Every backend
// runs it from its own tests:
//
//	storetest.Run(t, func(t *testing.T) store.Store { return openMine(t) })
//
// open must return a fresh, empty store and close it in t.Cleanup.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// Opener returns a fresh, empty store, closed in t.Cleanup.
type Opener func(t *testing.T) store.Store

// Run runs the whole suite.
func Run(t *testing.T, open Opener) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Tenants", testTenants},
		{"APIKeys", testAPIKeys},
		{"SandboxRoundTrip", testSandboxRoundTrip},
		{"SandboxIsolation", testSandboxIsolation},
		{"SandboxTransition", testSandboxTransition},
		{"SandboxConcurrentTransition", testSandboxConcurrentTransition},
		{"SandboxListFilters", testSandboxListFilters},
		{"SandboxPagination", testSandboxPagination},
		{"Quota", testQuota},
		{"Atomic", testAtomic},
		{"Operations", testOperations},
		{"OperationPagination", testOperationPagination},
		{"OperationLeases", testOperationLeases},
		{"OperationLeaseExpiry", testOperationLeaseExpiry},
		{"OperationClaimRace", testOperationClaimRace},
		{"ClaimExpiredOperations", testClaimExpiredOperations},
		{"StartOperation", testStartOperation},
		{"StartOperationRace", testStartOperationRace},
		{"Commands", testCommands},
		{"Idempotency", testIdempotency},
		{"IdempotencyConcurrent", testIdempotencyConcurrent},
		{"Templates", testTemplates},
		{"Secrets", testSecrets},
		{"Checkpoints", testCheckpoints},
		{"EnvdTokens", testEnvdTokens},
		{"PortTokens", testPortTokens},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantClass(t *testing.T, err error, c *errdefs.Class) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", c.Code())
	}
	if got := errdefs.ClassOf(err); got != c {
		t.Fatalf("got %v (class %s), want class %s", err, got.Code(), c.Code())
	}
}

func mkTenant(t *testing.T, s store.Store, name string) *store.Tenant {
	t.Helper()
	tn := &store.Tenant{Name: name}
	must(t, s.CreateTenant(ctxT(t), tn))
	return tn
}

func mkSandbox(t *testing.T, s store.Store, tenant string, mutate func(*store.Sandbox)) *store.Sandbox {
	t.Helper()
	sb := &store.Sandbox{TenantID: tenant, Template: "base", TemplateDigest: "sha256:aa", State: store.SandboxRunning,
		VCPUs: 1, MemoryMiB: 256, DiskMiB: 1024}
	if mutate != nil {
		mutate(sb)
	}
	must(t, s.CreateSandbox(ctxT(t), sb))
	return sb
}

func testTenants(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "alpha")
	if !store.HasPrefix(a.ID, store.PrefixTenant) || a.CreatedAt.IsZero() {
		t.Fatalf("created tenant not filled in: %+v", a)
	}
	got, err := s.GetTenant(ctx, a.ID)
	must(t, err)
	if *got != *a {
		t.Fatalf("GetTenant = %+v, want %+v", got, a)
	}
	got, err = s.GetTenantByName(ctx, "alpha")
	must(t, err)
	if got.ID != a.ID {
		t.Fatalf("GetTenantByName = %s, want %s", got.ID, a.ID)
	}
	wantClass(t, s.CreateTenant(ctx, &store.Tenant{Name: "alpha"}), errdefs.ErrConflict)
	wantClass(t, s.CreateTenant(ctx, &store.Tenant{}), errdefs.ErrInvalidArgument)
	_, err = s.GetTenant(ctx, "ten_nope")
	wantClass(t, err, errdefs.ErrNotFound)
	_, err = s.GetTenantByName(ctx, "nope")
	wantClass(t, err, errdefs.ErrNotFound)

	mkTenant(t, s, "beta")
	all, err := s.ListTenants(ctx)
	must(t, err)
	if len(all) != 2 || all[0].Name != "alpha" || all[1].Name != "beta" {
		t.Fatalf("ListTenants = %v", all)
	}
	q := store.Quota{MaxSandboxes: 3, MaxVCPUs: 4, MaxMemoryMiB: 1024}
	must(t, s.SetTenantQuota(ctx, a.ID, q))
	got, err = s.GetTenant(ctx, a.ID)
	must(t, err)
	if got.Quota != q {
		t.Fatalf("quota = %+v, want %+v", got.Quota, q)
	}
	wantClass(t, s.SetTenantQuota(ctx, "ten_nope", q), errdefs.ErrNotFound)
}

func testAPIKeys(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a, b := mkTenant(t, s, "a"), mkTenant(t, s, "b")
	k := &store.APIKey{TenantID: a.ID, Prefix: "space_abc", Hash: "h1", Admin: true}
	must(t, s.CreateAPIKey(ctx, k))
	must(t, s.CreateAPIKey(ctx, &store.APIKey{TenantID: b.ID, Prefix: "space_def", Hash: "h2"}))
	wantClass(t, s.CreateAPIKey(ctx, &store.APIKey{TenantID: b.ID, Hash: "h1"}), errdefs.ErrConflict)
	wantClass(t, s.CreateAPIKey(ctx, &store.APIKey{TenantID: "ten_nope", Hash: "h3"}), errdefs.ErrNotFound)

	got, err := s.GetAPIKeyByHash(ctx, "h1")
	must(t, err)
	if got.ID != k.ID || got.TenantID != a.ID || !got.Admin || got.Prefix != "space_abc" || got.RevokedAt != nil ||
		!got.CreatedAt.Equal(k.CreatedAt) {
		t.Fatalf("GetAPIKeyByHash = %+v, want %+v", got, k)
	}
	_, err = s.GetAPIKeyByHash(ctx, "nope")
	wantClass(t, err, errdefs.ErrNotFound)

	keys, err := s.ListAPIKeys(ctx, a.ID)
	must(t, err)
	if len(keys) != 1 || keys[0].ID != k.ID {
		t.Fatalf("ListAPIKeys(a) = %v", keys)
	}
	all, err := s.ListAPIKeys(ctx, store.AnyTenant)
	must(t, err)
	if len(all) != 2 {
		t.Fatalf("ListAPIKeys(any) has %d keys, want 2", len(all))
	}

	must(t, s.RevokeAPIKey(ctx, k.ID))
	got, err = s.GetAPIKeyByHash(ctx, "h1")
	must(t, err)
	if got.RevokedAt == nil {
		t.Fatal("revoked key has no RevokedAt")
	}
	first := *got.RevokedAt
	must(t, s.RevokeAPIKey(ctx, k.ID)) // idempotent, keeps the first time
	got, err = s.GetAPIKeyByHash(ctx, "h1")
	must(t, err)
	if !got.RevokedAt.Equal(first) {
		t.Fatalf("second revoke moved RevokedAt from %v to %v", first, got.RevokedAt)
	}
	wantClass(t, s.RevokeAPIKey(ctx, "key_nope"), errdefs.ErrNotFound)
}

// sameSandbox fails unless two records are equal field by field.
func sameSandbox(t *testing.T, got, want *store.Sandbox) {
	t.Helper()
	// Pointers print as addresses; compare them by value.
	gotExp, wantExp := got.ExpiresAt, want.ExpiresAt
	gotErr, wantErr := got.LastError, want.LastError
	gc, wc := *got, *want
	gc.ExpiresAt, wc.ExpiresAt, gc.LastError, wc.LastError = nil, nil, nil, nil
	g, w := fmt.Sprintf("%+v", gc), fmt.Sprintf("%+v", wc)
	if g != w {
		t.Fatalf("sandbox differs:\n got  %s\n want %s", g, w)
	}
	if (gotExp == nil) != (wantExp == nil) || (gotExp != nil && !gotExp.Equal(*wantExp)) {
		t.Fatalf("ExpiresAt = %v, want %v", gotExp, wantExp)
	}
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && *gotErr != *wantErr) {
		t.Fatalf("LastError = %v, want %v", gotErr, wantErr)
	}
}

func testAtomic(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "a")
	boom := errors.New("boom")
	var sbID, opID string
	err := s.Atomic(ctx, func(ctx context.Context, tx store.Store) error {
		sb := &store.Sandbox{TenantID: a.ID, Template: "base", State: store.SandboxCreating, VCPUs: 1, MemoryMiB: 128}
		if err := tx.CreateSandbox(ctx, sb); err != nil {
			return err
		}
		op := &store.Operation{TenantID: a.ID, Type: store.OpCreate, Target: sb.ID}
		if err := tx.CreateOperation(ctx, op); err != nil {
			return err
		}
		sbID, opID = sb.ID, op.ID
		// A nested Atomic joins the transaction.
		return tx.Atomic(ctx, func(ctx context.Context, tx store.Store) error {
			_, err := tx.GetSandbox(ctx, a.ID, sbID)
			if err != nil {
				return err
			}
			return boom
		})
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Atomic = %v, want the callback's error", err)
	}
	_, err = s.GetSandbox(ctx, a.ID, sbID)
	wantClass(t, err, errdefs.ErrNotFound)
	_, err = s.GetOperation(ctx, a.ID, opID)
	wantClass(t, err, errdefs.ErrNotFound)

	err = s.Atomic(ctx, func(ctx context.Context, tx store.Store) error {
		sb := &store.Sandbox{TenantID: a.ID, Template: "base", State: store.SandboxCreating}
		if err := tx.CreateSandbox(ctx, sb); err != nil {
			return err
		}
		sbID = sb.ID
		return tx.CreateOperation(ctx, &store.Operation{TenantID: a.ID, Type: store.OpCreate, Target: sb.ID})
	})
	must(t, err)
	_, err = s.GetSandbox(ctx, a.ID, sbID)
	must(t, err)
	ops, err := s.ListOperations(ctx, store.OperationFilter{Target: sbID})
	must(t, err)
	if len(ops.Items) != 1 {
		t.Fatalf("operations of committed sandbox = %d, want 1", len(ops.Items))
	}
}
