package storetest

import (
	"bytes"
	"context"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

func testSecrets(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a, b := mkTenant(t, s, "sec-a"), mkTenant(t, s, "sec-b")

	sec := &store.Secret{TenantID: a.ID, Name: "token", Sealed: []byte("sealed-1")}
	created, err := s.PutSecret(ctx, sec)
	must(t, err)
	if !created || sec.CreatedAt.IsZero() || !sec.UpdatedAt.Equal(sec.CreatedAt) {
		t.Fatalf("first put: created=%v created_at=%v updated_at=%v", created, sec.CreatedAt, sec.UpdatedAt)
	}
	first := sec.CreatedAt

	again := &store.Secret{TenantID: a.ID, Name: "token", Sealed: []byte("sealed-2")}
	created, err = s.PutSecret(ctx, again)
	must(t, err)
	if created || !again.CreatedAt.Equal(first) || again.UpdatedAt.Before(first) {
		t.Fatalf("replace: created=%v created_at=%v (want %v) updated_at=%v", created, again.CreatedAt, first, again.UpdatedAt)
	}
	got, err := s.GetSecret(ctx, a.ID, "token")
	must(t, err)
	if !bytes.Equal(got.Sealed, []byte("sealed-2")) || !got.CreatedAt.Equal(first) {
		t.Fatalf("get after replace: %+v", got)
	}

	// Tenant scoping: b sees nothing of a's, and may use the same name.
	_, err = s.GetSecret(ctx, b.ID, "token")
	wantClass(t, err, errdefs.ErrNotFound)
	wantClass(t, s.DeleteSecret(ctx, b.ID, "token"), errdefs.ErrNotFound)
	_, err = s.PutSecret(ctx, &store.Secret{TenantID: b.ID, Name: "token", Sealed: []byte("b")})
	must(t, err)

	_, err = s.PutSecret(ctx, &store.Secret{TenantID: a.ID, Name: "another", Sealed: []byte("x")})
	must(t, err)
	list, err := s.ListSecrets(ctx, a.ID)
	must(t, err)
	if len(list) != 2 || list[0].Name != "another" || list[1].Name != "token" {
		t.Fatalf("list: %+v", list)
	}
	for _, l := range list {
		if len(l.Sealed) != 0 {
			t.Fatalf("list carries sealed values: %+v", l)
		}
	}

	_, err = s.PutSecret(ctx, &store.Secret{TenantID: a.ID, Name: "empty"})
	wantClass(t, err, errdefs.ErrInvalidArgument)

	must(t, s.DeleteSecret(ctx, a.ID, "token"))
	wantClass(t, s.DeleteSecret(ctx, a.ID, "token"), errdefs.ErrNotFound)
	_, err = s.GetSecret(ctx, a.ID, "token")
	wantClass(t, err, errdefs.ErrNotFound)
	if got, err := s.GetSecret(ctx, b.ID, "token"); err != nil || string(got.Sealed) != "b" {
		t.Fatalf("b's secret after a's delete: %v %v", got, err)
	}

	// Atomic: a put inside a failed transaction is not kept.
	err = s.Atomic(ctx, func(ctx context.Context, tx store.Store) error {
		if _, err := tx.PutSecret(ctx, &store.Secret{TenantID: a.ID, Name: "rolled-back", Sealed: []byte("x")}); err != nil {
			return err
		}
		return errdefs.ErrConflict
	})
	wantClass(t, err, errdefs.ErrConflict)
	_, err = s.GetSecret(ctx, a.ID, "rolled-back")
	wantClass(t, err, errdefs.ErrNotFound)
}
