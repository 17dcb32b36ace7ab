package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/postgres"
	"github.com/space-sandbox/space/internal/store/sqlite"
)

// StoreEnv names the environment variable --store defaults from, so a DSN
// with a password need not stand on the command line (where ps shows it).
const StoreEnv = "SPACE_STORE"

// errStoreFlag is the error for a --store that names no store we open. It
// never repeats the value, which may carry a password.
var errStoreFlag = errors.New("--store must be a postgres:// or postgresql:// URL of a PostgreSQL database, " +
	"or empty for the SQLite file in the data dir")

// checkStore validates --store at parse time.
func checkStore(v string) error {
	if v != "" && !postgres.IsDSN(v) {
		return errStoreFlag
	}
	return nil
}

// openStore opens the store --store names: the SQLite file in the data dir
// by default, or the PostgreSQL database of a postgres:// URL. Logs and
// errors show the URL without its password.
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (store.Store, error) {
	if cfg.Store == "" {
		path := filepath.Join(cfg.DataDir, "space.db")
		log.Info("store", "kind", "sqlite", "path", path)
		return sqlite.Open(path)
	}
	if err := checkStore(cfg.Store); err != nil {
		return nil, err
	}
	log.Info("store", "kind", "postgres", "dsn", postgres.Redact(cfg.Store))
	db, err := postgres.Open(ctx, cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("--store: %w", err)
	}
	return db, nil
}

// operationOwner names this process in operation leases: stable across
// restarts (so recovery ends its own leftovers at once) and, on a shared
// PostgreSQL store, unique among the control replicas (host and listen
// address). A SQLite store has one replica, named after the host.
func operationOwner(cfg Config) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "spaced"
	}
	if cfg.Store == "" {
		return host
	}
	return host + "/" + cfg.Listen
}
