// Package sqlite is the single-node store.Store: one SQLite database file in
// WAL mode, driven by the pure-Go modernc.org/sqlite. All writes go through
// one connection whose transactions begin IMMEDIATE, so writers queue in
// process instead of failing with SQLITE_BUSY; reads use a small pool of
// read-only connections that WAL lets run beside the writer. Each
// connection keeps its statements prepared (stmtcache.go). The schema is
// versioned by embedded migrations recorded in schema_migrations.
//
// Inside Atomic, the context handed to fn carries the transaction: a call on
// the outer Store with that context joins it rather than deadlocking on the
// one writer connection.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store on one SQLite file.
type Store struct {
	conn
	writer *sql.DB
	reader *sql.DB
}

var _ store.Store = (*Store)(nil)

// dbtx is what *sql.DB and *sql.Tx share.
type dbtx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// conn carries the methods of store.Store. Outside a transaction it reads
// from the reader pool and writes through the writer; inside one, both are
// the transaction.
type conn struct {
	rd, wr dbtx
	writer *sql.DB // nil inside a transaction
	tx     *sql.Tx // set inside a transaction
	owner  *sql.DB // inside a transaction: the writer it runs on
}

func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// Open opens (creating when missing) the database at path and migrates it to
// the newest schema.
func Open(path string) (*Store, error) {
	w, err := openDB(dsn(path, false))
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0)
	ctx := context.Background()
	// The writer opens first so WAL mode is on before any reader connects.
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, err
	}
	r, err := openDB(dsn(path, true))
	if err != nil {
		w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(4)
	s := &Store{writer: w, reader: r}
	s.conn = conn{rd: r, wr: w, writer: w}
	return s, nil
}

// openDB is a pool of connections to dsn that keep their prepared
// statements (stmtcache.go).
func openDB(dsn string) (*sql.DB, error) {
	c, err := msqlite.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", errdefs.ErrInternal)
	}
	return sql.OpenDB(cachingConnector{c}), nil
}

// Close closes the database.
func (s *Store) Close() error {
	return errors.Join(s.reader.Close(), s.writer.Close())
}

// migrate applies the embedded migrations not yet recorded.
func migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		return dbErr("create schema_migrations", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("list migrations: %w", errdefs.ErrInternal)
	}
	sort.Strings(names)
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		num, _, _ := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if err != nil {
			return fmt.Errorf("migration %s: bad version: %w", base, errdefs.ErrInternal)
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return fmt.Errorf("read migration %s: %w", base, errdefs.ErrInternal)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return dbErr("begin migration", err)
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, version).Scan(&n); err != nil {
			tx.Rollback()
			return dbErr("read schema_migrations", err)
		}
		if n > 0 {
			tx.Rollback()
			continue
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return dbErr("apply migration "+base, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			version, base, time.Now().UnixNano()); err != nil {
			tx.Rollback()
			return dbErr("record migration "+base, err)
		}
		if err := tx.Commit(); err != nil {
			return dbErr("commit migration "+base, err)
		}
	}
	return nil
}

// Atomic runs fn in one transaction (joining the current one when nested).
func (c *conn) Atomic(ctx context.Context, fn func(ctx context.Context, tx store.Store) error) error {
	c = c.bind(ctx)
	return c.atomic(ctx, func(tc *conn) error { return fn(context.WithValue(ctx, txKey{}, tc), tc) })
}

// Close inside a transaction is a no-op; the outer Store owns the database.
func (c *conn) Close() error { return nil }

// txKey carries the transaction's conn in the context Atomic hands to fn.
type txKey struct{}

// bind returns the conn of the transaction ctx carries, if it belongs to
// this store. A call on the outer Store with a context from inside Atomic
// thus joins the transaction instead of waiting for the one writer
// connection that transaction holds (a deadlock otherwise).
func (c *conn) bind(ctx context.Context) *conn {
	if c.tx != nil {
		return c
	}
	if tc, ok := ctx.Value(txKey{}).(*conn); ok && tc.owner == c.writer {
		return tc
	}
	return c
}

// atomic runs fn on a conn bound to a transaction.
func (c *conn) atomic(ctx context.Context, fn func(tc *conn) error) (err error) {
	c = c.bind(ctx)
	if c.tx != nil {
		return fn(c)
	}
	tx, err := c.writer.BeginTx(ctx, nil)
	if err != nil {
		return dbErr("begin", err)
	}
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(&conn{rd: tx, wr: tx, tx: tx, owner: c.writer}); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return dbErr("commit", err)
	}
	return nil
}

// dbErr wraps a database error in its errdefs class. The SQLite message
// stays in the chain for logs; it is never an errdefs.Public.
func dbErr(what string, err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, errdefs.ErrNotFound)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrCancelled, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrDeadlineExceeded, err)
	}
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%s: already exists: %w", what, errdefs.ErrConflict)
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return fmt.Errorf("%s: a referenced object does not exist: %w", what, errdefs.ErrNotFound)
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("%s: database busy: %w: %v", what, errdefs.ErrUnavailable, err)
		}
	}
	return fmt.Errorf("%s: %w: %v", what, errdefs.ErrInternal, err)
}
