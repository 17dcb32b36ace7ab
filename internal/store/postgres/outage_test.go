package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/postgres"
	"github.com/space-sandbox/space/internal/testenv/pgtest"
)

// TestServerKilledAndRestarted: while the server is down (SIGKILLed with its
// backends), every call fails unavailable at once — not internal, not a
// hang — with no password in its message, inside a transaction too; once
// the server is started again on its data dir the same Store reconnects by
// itself and sees what was committed before the crash.
func TestServerKilledAndRestarted(t *testing.T) {
	srv, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx := ctxT(t)
	dsn := srv.DSN("postgres")
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tenant := &store.Tenant{Name: "kept"}
	if err := s.CreateTenant(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	// Connections in the pool, idle and then cut by the kill.
	for range 4 {
		if _, err := s.GetTenant(ctx, tenant.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(dsn)
	password, _ := u.User.Password()
	for i, call := range []func(context.Context) error{
		func(ctx context.Context) error { _, err := s.GetTenant(ctx, tenant.ID); return err },
		func(ctx context.Context) error { return s.CreateTenant(ctx, &store.Tenant{Name: "lost"}) },
		func(ctx context.Context) error {
			return s.Atomic(ctx, func(ctx context.Context, tx store.Store) error { _, err := tx.ListTenants(ctx); return err })
		},
	} {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := call(cctx)
		expired := cctx.Err() != nil
		cancel()
		if expired {
			t.Fatalf("call %d waited out its 30s deadline with the server down: %v", i, err)
		}
		if errdefs.ClassOf(err) != errdefs.ErrUnavailable {
			t.Errorf("call %d with the server down: %v (class %s), want unavailable", i, err, errdefs.ClassOf(err).Code())
		}
		if err != nil && strings.Contains(err.Error(), password) {
			t.Errorf("call %d: the error shows the password: %v", i, err)
		}
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	servesAgain(ctx, t, s, tenant, "the restart")
}

// TestServerFrozen: a server that stops answering without closing its
// connections (every process SIGSTOPped) does not hang a call whose
// context has no deadline, as an API request's has none: each call ends
// unavailable once the store's statement bound has passed — reads, writes,
// a page of rows and a transaction alike — and, the server thawed, the
// same Store serves again with what it confirmed.
func TestServerFrozen(t *testing.T) {
	srv, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx := ctxT(t)
	s, err := postgres.Open(ctx, srv.DSN("postgres"), postgres.WithStatementTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tenant := &store.Tenant{Name: "kept"}
	if err := s.CreateTenant(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer srv.Thaw()
	for name, call := range map[string]func(context.Context) error{
		"read":  func(ctx context.Context) error { _, err := s.GetTenant(ctx, tenant.ID); return err },
		"write": func(ctx context.Context) error { return s.CreateTenant(ctx, &store.Tenant{Name: "lost"}) },
		"rows":  func(ctx context.Context) error { _, err := s.ListTenants(ctx); return err },
		"transaction": func(ctx context.Context) error {
			return s.Atomic(ctx, func(ctx context.Context, tx store.Store) error {
				return tx.CreateTenant(ctx, &store.Tenant{Name: "lost too"})
			})
		},
	} {
		done := make(chan error, 1)
		go func() { done <- call(context.Background()) }()
		select {
		case err := <-done:
			if errdefs.ClassOf(err) != errdefs.ErrUnavailable {
				t.Errorf("%s with the server frozen: %v (class %s), want unavailable", name, err, errdefs.ClassOf(err).Code())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s with the server frozen still waits after 30s (the bound is 1s)", name)
		}
	}
	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
	servesAgain(ctx, t, s, tenant, "the thaw")
	// A write the bound gave up on may still commit once the server runs
	// again (it was in the server's socket already): its outcome is
	// unknown, which is what unavailable says. What was confirmed is there.
	list, err := s.ListTenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tn := range list {
		names[tn.Name] = true
	}
	if !names["kept"] || !names["after"] {
		t.Fatalf("tenants after the thaw: %v; want kept and after among them", names)
	}
}

// servesAgain waits, bounded, until s reads tenant (named "kept") again
// after when, each failure meanwhile unavailable, and then writes a tenant
// "after".
func servesAgain(ctx context.Context, t *testing.T, s *postgres.Store, tenant *store.Tenant, when string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := s.GetTenant(ctx, tenant.ID)
		if err == nil {
			if got.Name != "kept" {
				t.Fatalf("after %s the tenant reads %+v", when, got)
			}
			break
		}
		if time.Now().After(deadline) || !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("after %s: %v", when, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.CreateTenant(ctx, &store.Tenant{Name: "after"}); err != nil {
		t.Fatalf("a write after %s: %v", when, err)
	}
}
