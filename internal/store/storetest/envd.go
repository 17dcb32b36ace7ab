package storetest

import (
	"errors"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

func testEnvdTokens(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "envd-a")
	tok := &store.EnvdToken{SandboxID: "sbx_one", TenantID: a.ID, Hash: "h1"}
	must(t, s.CreateEnvdToken(ctx, tok))
	if tok.CreatedAt.IsZero() {
		t.Fatal("CreatedAt not set")
	}
	// A second token of the same sandbox (another connect) is kept too.
	must(t, s.CreateEnvdToken(ctx, &store.EnvdToken{SandboxID: "sbx_one", TenantID: a.ID, Hash: "h2"}))
	for _, h := range []string{"h1", "h2"} {
		got, err := s.GetEnvdToken(ctx, "sbx_one", h)
		must(t, err)
		if got.TenantID != a.ID || got.SandboxID != "sbx_one" || got.Hash != h {
			t.Fatalf("got %+v", got)
		}
	}
	// A token authorises only its own sandbox.
	for _, c := range []struct{ sbx, hash string }{{"sbx_two", "h1"}, {"sbx_one", "h3"}} {
		if _, err := s.GetEnvdToken(ctx, c.sbx, c.hash); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("GetEnvdToken(%s, %s) = %v, want ErrNotFound", c.sbx, c.hash, err)
		}
	}
	if err := s.CreateEnvdToken(ctx, &store.EnvdToken{SandboxID: "sbx_one", TenantID: a.ID, Hash: "h1"}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate token: %v, want ErrConflict", err)
	}
	if err := s.CreateEnvdToken(ctx, &store.EnvdToken{SandboxID: "sbx_one"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("empty token: %v, want ErrInvalidArgument", err)
	}
}
