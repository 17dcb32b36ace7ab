package pgtest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/space-sandbox/space/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestDatabasesArePrivate checks that each test gets its own empty database
// on a server that demands the password.
func TestDatabasesArePrivate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := pgtest.DSN(t), pgtest.DSN(t)
	ca, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close(ctx)
	if _, err := ca.Exec(ctx, "CREATE TABLE only_here (x int)"); err != nil {
		t.Fatal(err)
	}
	cb, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(ctx)
	var n int
	if err := cb.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the other database sees the table: %d %v", n, err)
	}
	cfg, err := pgx.ParseConfig(a)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = "wrong"
	if c, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		c.Close(ctx)
		t.Fatal("connected with a wrong password")
	}
}

// TestRestartAfterKill SIGKILLs the server (the postmaster by its PID and
// its backends), as a crash would, and restarts it on the same data dir: what was committed is
// there, and the old DSN connects again.
func TestRestartAfterKill(t *testing.T) {
	s, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn := s.DSN("postgres")
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a connection to the killed server still answers")
	}
	c.Close(ctx)
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s.PID() == pid || s.PID() == 0 {
		t.Fatalf("after the restart the postmaster is pid %d (was %d)", s.PID(), pid)
	}
	c, err = pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var x int
	if err := c.QueryRow(ctx, "SELECT x FROM kept").Scan(&x); err != nil || x != 42 {
		t.Fatalf("after the restart: %d, %v", x, err)
	}
}
