package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

func TestParseFlagsStore(t *testing.T) {
	t.Setenv(StoreEnv, "")
	cfg, err := ParseFlags(nil)
	if err != nil || cfg.Store != "" {
		t.Fatalf("default --store = %q, %v; want empty (SQLite in the data dir)", cfg.Store, err)
	}
	for _, dsn := range []string{"postgres://space:pw@db.internal:5432/space?sslmode=require", "postgresql://db/space"} {
		cfg, err := ParseFlags([]string{"--store", dsn})
		if err != nil || cfg.Store != dsn {
			t.Errorf("--store %s: %q, %v", dsn, cfg.Store, err)
		}
	}
	t.Setenv(StoreEnv, "postgres://from-env/space")
	if cfg, err := ParseFlags(nil); err != nil || cfg.Store != "postgres://from-env/space" {
		t.Errorf("--store from $%s: %q, %v", StoreEnv, cfg.Store, err)
	}
	const secret = "hunter2-secret"
	for _, bad := range []string{"mysql://u:" + secret + "@db/x", "/var/lib/space/space.db", "host=db password=" + secret} {
		_, err := ParseFlags([]string{"--store", bad})
		if err == nil {
			t.Errorf("--store %q accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "--store") {
			t.Errorf("--store %q: error %q must name the flag and not repeat the value", bad, err)
		}
	}
}

// TestOpenStoreBadDSN: a DSN that reaches no server fails with a clear
// error, and neither the error nor the log carries its password.
func TestOpenStoreBadDSN(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const secret = "hunter2-secret"
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	nowhere := filepath.Join(t.TempDir(), "no-server")
	for _, dsn := range []string{
		"postgres://space:" + secret + "@/space?host=" + nowhere + "&connect_timeout=5",
		"postgresql://space:" + secret + "@[::1/space",
	} {
		db, err := openStore(ctx, Config{Store: dsn, DataDir: t.TempDir()}, log)
		if err == nil {
			db.Close()
			t.Fatalf("opened %s", dsn)
		}
		c := errdefs.ClassOf(err)
		if c != errdefs.ErrUnavailable && c != errdefs.ErrInvalidArgument {
			t.Errorf("error class %s, want unavailable or invalid_argument: %v", c.Code(), err)
		}
		if msg := err.Error(); strings.Contains(msg, secret) || !strings.Contains(msg, "--store") || !strings.Contains(msg, "PostgreSQL") {
			t.Errorf("error %q must name --store and PostgreSQL and not carry the password", msg)
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatalf("the log carries the password:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "xxxxx") {
		t.Fatalf("the log does not name the (redacted) store:\n%s", logs.String())
	}
}

func TestOperationOwner(t *testing.T) {
	single := operationOwner(Config{Listen: "127.0.0.1:8080"})
	if single == "" || single != operationOwner(Config{Listen: "127.0.0.1:9090"}) {
		t.Fatalf("a SQLite store's owner %q must not depend on the listen address", single)
	}
	a := operationOwner(Config{Store: "postgres://db/space", Listen: "127.0.0.1:8080"})
	b := operationOwner(Config{Store: "postgres://db/space", Listen: "127.0.0.1:8081"})
	if a == b || a != operationOwner(Config{Store: "postgres://db/space", Listen: "127.0.0.1:8080"}) {
		t.Fatalf("replicas on one host share a store: owners %q and %q must differ and stay stable", a, b)
	}
}
