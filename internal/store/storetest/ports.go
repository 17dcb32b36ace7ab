package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

func testPortTokens(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "ports-a")
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	private := &store.PortToken{TenantID: a.ID, SandboxID: "sbx_one", Port: 8080, Hash: "h1", ExpiresAt: &exp}
	must(t, s.CreatePortToken(ctx, private))
	if !store.HasPrefix(private.ID, store.PrefixPortToken) || private.CreatedAt.IsZero() {
		t.Fatalf("ID/CreatedAt not set: %+v", private)
	}
	public := &store.PortToken{TenantID: a.ID, SandboxID: "sbx_one", Port: 3000, Public: true, ExpiresAt: &exp}
	must(t, s.CreatePortToken(ctx, public))
	traffic := &store.PortToken{TenantID: a.ID, SandboxID: "sbx_one", Port: 0, Hash: "h2"}
	must(t, s.CreatePortToken(ctx, traffic))
	must(t, s.CreatePortToken(ctx, &store.PortToken{TenantID: a.ID, SandboxID: "sbx_two", Port: 80, Hash: "h3"}))

	got, err := s.GetPortTokenByHash(ctx, "sbx_one", "h1")
	must(t, err)
	if got.ID != private.ID || got.TenantID != a.ID || got.Port != 8080 || got.Public ||
		got.ExpiresAt == nil || !got.ExpiresAt.Equal(exp) || !got.CreatedAt.Equal(private.CreatedAt) {
		t.Fatalf("got %+v, want %+v", got, private)
	}
	got, err = s.GetPortTokenByHash(ctx, "sbx_one", "h2")
	must(t, err)
	if got.Port != 0 || got.ExpiresAt != nil {
		t.Fatalf("traffic token read back as %+v", got)
	}
	// A hash opens only its own sandbox; a public record has no hash to find.
	for _, c := range []struct{ sbx, hash string }{{"sbx_two", "h1"}, {"sbx_one", "h3"}, {"sbx_one", ""}} {
		if _, err := s.GetPortTokenByHash(ctx, c.sbx, c.hash); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("GetPortTokenByHash(%s, %q) = %v, want ErrNotFound", c.sbx, c.hash, err)
		}
	}
	list, err := s.ListPortTokens(ctx, "sbx_one")
	must(t, err)
	if len(list) != 3 || list[0].ID != private.ID || list[1].ID != public.ID || !list[1].Public || list[2].ID != traffic.ID {
		t.Fatalf("ListPortTokens = %+v", list)
	}
	// Two public records of a sandbox are fine; a private hash is unique in it.
	must(t, s.CreatePortToken(ctx, &store.PortToken{TenantID: a.ID, SandboxID: "sbx_one", Port: 3000, Public: true}))
	if err := s.CreatePortToken(ctx, &store.PortToken{TenantID: a.ID, SandboxID: "sbx_one", Port: 1, Hash: "h1"}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate hash: %v, want ErrConflict", err)
	}
	for _, bad := range []*store.PortToken{
		{SandboxID: "sbx_one", Hash: "x"},                               // no tenant
		{TenantID: a.ID, SandboxID: "sbx_one"},                          // private without hash
		{TenantID: a.ID, SandboxID: "sbx_one", Public: true, Hash: "x"}, // public with one
	} {
		if err := s.CreatePortToken(ctx, bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("CreatePortToken(%+v) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	// Deleting is per sandbox and idempotent.
	must(t, s.DeletePortTokens(ctx, "sbx_one"))
	must(t, s.DeletePortTokens(ctx, "sbx_one"))
	if list, err := s.ListPortTokens(ctx, "sbx_one"); err != nil || len(list) != 0 {
		t.Fatalf("after delete: %v, %v", list, err)
	}
	if _, err := s.GetPortTokenByHash(ctx, "sbx_two", "h3"); err != nil {
		t.Fatalf("other sandbox's token gone: %v", err)
	}
}
