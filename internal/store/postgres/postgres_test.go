package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/postgres"
	"github.com/space-sandbox/space/internal/store/storetest"
	"github.com/space-sandbox/space/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T) store.Store {
	s, err := postgres.Open(ctxT(t), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, open)
}

// TestConcurrentMigration opens one fresh database from several replicas at
// once: the advisory lock makes one migrate and the others find it done.
func TestConcurrentMigration(t *testing.T) {
	ctx := ctxT(t)
	dsn := pgtest.DSN(t)
	const n = 4
	errs := make(chan error, n)
	stores := make(chan *postgres.Store, n)
	for range n {
		go func() {
			s, err := postgres.Open(ctx, dsn)
			errs <- err
			stores <- s
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent open: %v", err)
		}
		if s := <-stores; s != nil {
			t.Cleanup(func() { s.Close() })
		}
	}
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var rows, distinct, newest int
	if err := c.QueryRow(ctx, `SELECT count(*), count(DISTINCT version), max(version) FROM schema_migrations`).
		Scan(&rows, &distinct, &newest); err != nil {
		t.Fatal(err)
	}
	if rows != distinct || newest < 2 {
		t.Fatalf("schema_migrations: %d rows, %d versions, newest %d", rows, distinct, newest)
	}
	// Reopening applies nothing again.
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	var again int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&again); err != nil || again != rows {
		t.Fatalf("after reopen %d rows (%v), want %d", again, err, rows)
	}
}

// TestFailedStatementInsideAtomic: a statement that fails inside Atomic
// (a duplicate) leaves the transaction usable, as on SQLite, and a call on
// the outer Store with Atomic's context joins the transaction.
func TestFailedStatementInsideAtomic(t *testing.T) {
	ctx := ctxT(t)
	s := open(t)
	if err := s.CreateTenant(ctx, &store.Tenant{Name: "taken"}); err != nil {
		t.Fatal(err)
	}
	err := s.Atomic(ctx, func(ctx context.Context, tx store.Store) error {
		if err := tx.CreateTenant(ctx, &store.Tenant{Name: "taken"}); errdefs.ClassOf(err) != errdefs.ErrConflict {
			return fmt.Errorf("duplicate inside Atomic: %v, want conflict", err)
		}
		return s.CreateTenant(ctx, &store.Tenant{Name: "after"}) // outer Store, joined
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTenantByName(ctx, "after"); err != nil {
		t.Fatalf("the statement after the failed one was lost: %v", err)
	}
	boom := errors.New("boom")
	err = s.Atomic(ctx, func(ctx context.Context, _ store.Store) error {
		if err := s.CreateTenant(ctx, &store.Tenant{Name: "rolled-back"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Atomic = %v, want boom", err)
	}
	if _, err := s.GetTenantByName(ctx, "rolled-back"); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Fatalf("a call joined to a rolled-back transaction was kept: %v", err)
	}
}

// TestOpenErrorsHideThePassword: a wrong password, an unreachable server and
// a malformed DSN fail with a clear error that never carries the password.
func TestOpenErrorsHideThePassword(t *testing.T) {
	ctx := ctxT(t)
	good, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	const secret = "s3cret-Pa55word"
	wrong := *good
	wrong.User = url.UserPassword("space", secret)
	gone := wrong
	q := gone.Query()
	q.Set("host", filepath.Join(t.TempDir(), "nowhere"))
	gone.RawQuery = q.Encode()
	for _, tc := range []struct {
		name, dsn string
		class     *errdefs.Class
	}{
		{"wrong password", wrong.String(), errdefs.ErrUnavailable},
		{"no server", gone.String(), errdefs.ErrUnavailable},
		{"malformed URL", "postgres://space:" + secret + "@[::1/db", errdefs.ErrInvalidArgument},
		{"bad option", "postgres://space:" + secret + "@localhost/db?sslmode=sometimes", errdefs.ErrInvalidArgument},
		{"key=value", "host=/nowhere password=" + secret + " connect_timeout=oops", errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := postgres.Open(ctx, tc.dsn)
			if err == nil {
				s.Close()
				t.Fatal("opened")
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error shows the password: %v", err)
			}
			if errdefs.ClassOf(err) != tc.class {
				t.Fatalf("error %v is %s, want %s", err, errdefs.ClassOf(err).Code(), tc.class.Code())
			}
			if !strings.Contains(err.Error(), "PostgreSQL") {
				t.Fatalf("error does not say what failed: %v", err)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:pw@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"postgresql://u@h/db", "postgresql://u@h/db"},
		{"postgres://h/db?password=pw&user=u", "postgres://h/db?password=xxxxx&user=u"},
		{"host=h password=pw user=u", "host=h password=xxxxx user=u"},
		{"host=h password='p w' user=u", "host=h password=xxxxx user=u"},
	} {
		if got := postgres.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
