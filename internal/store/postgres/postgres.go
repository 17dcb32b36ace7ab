// Package postgres is the cluster's store.Store: one PostgreSQL database
// shared by every control replica, driven by jackc/pgx v5 through a pgxpool.
// The schema is versioned by embedded migrations, applied in one
// transaction under an advisory lock, so replicas starting together migrate
// once.
//
// Its semantics are store/sqlite's, pinned by store/storetest: transactions
// run SERIALIZABLE and are retried on a serialization failure or deadlock,
// so a read-check-write inside Atomic holds as it does on SQLite's single
// writer; compare-and-set methods lock the row they change; a failed
// statement inside Atomic is rolled back to a savepoint so the transaction
// goes on, as on SQLite. Times are stored as Unix nanoseconds (exact round
// trips); operation leases run on the database's clock.
//
// Inside Atomic, the context handed to fn carries the transaction: a call on
// the outer Store with that context joins it. The DSN's password never
// appears in an error or a log. A database that cannot be reached or went
// away (killed, restarting) is errdefs.ErrUnavailable on every call, and
// the pool reconnects by itself once it is back.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// Store is a store.Store on one PostgreSQL database.
type Store struct {
	conn
}

var _ store.Store = (*Store)(nil)

// querier is what a pool and a transaction share.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// conn carries the methods of store.Store: on the pool outside a
// transaction, on the transaction (or a savepoint in it) inside one.
type conn struct {
	pool  *pgxpool.Pool
	tx    pgx.Tx // nil outside a transaction
	q     querier
	bound time.Duration // each statement's (bounded.go)
}

// on returns a conn for the transaction or savepoint tx.
func (c *conn) on(tx pgx.Tx) *conn {
	return &conn{pool: c.pool, tx: tx, q: boundedQuerier{q: tx, bound: c.bound}, bound: c.bound}
}

// connectTimeout bounds Open's first connection and migration; dialTimeout
// each new connection of the pool, unless the DSN says connect_timeout.
const (
	connectTimeout = 30 * time.Second
	dialTimeout    = 5 * time.Second
)

// Open connects to the database dsn names (a postgres:// or postgresql://
// URL, or key=value pairs) and migrates it to the newest schema.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	o := options{statementTimeout: DefaultStatementTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "invalid PostgreSQL DSN %s: %s", Redact(dsn), scrub(err, dsn))
	}
	password := cfg.ConnConfig.Password
	// A request has no deadline of its own: a connect to a host that went
	// silent must not hang it (a refused or vanished socket fails at once).
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = dialTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrUnavailable, "connect to PostgreSQL %s: %s", Redact(dsn), scrub(err, password))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, errdefs.New(errdefs.ErrUnavailable, "connect to PostgreSQL %s: %s", Redact(dsn), scrub(err, password))
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, errdefs.New(errdefs.ErrUnavailable, "migrate PostgreSQL %s: %s", Redact(dsn), scrub(err, password))
	}
	return &Store{conn: conn{pool: pool, q: boundedQuerier{q: pool, bound: o.statementTimeout}, bound: o.statementTimeout}}, nil
}

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Close inside a transaction is a no-op; the outer Store owns the pool.
func (c *conn) Close() error { return nil }

// txKey carries the transaction's conn in the context Atomic hands to fn.
type txKey struct{}

// bind returns the conn of the transaction ctx carries, if it is this
// store's, so a call on the outer Store inside Atomic joins the transaction.
func (c *conn) bind(ctx context.Context) *conn {
	if c.tx != nil {
		return c
	}
	if tc, ok := ctx.Value(txKey{}).(*conn); ok && tc.pool == c.pool {
		return tc
	}
	return c
}

// Atomic runs fn in one transaction (joining the current one when nested).
// A transaction that loses a serialization race is run again, fn included.
func (c *conn) Atomic(ctx context.Context, fn func(ctx context.Context, tx store.Store) error) error {
	c = c.bind(ctx)
	if c.tx != nil {
		return fn(context.WithValue(ctx, txKey{}, c), c)
	}
	return c.atomic(ctx, func(tc *conn) error { return fn(context.WithValue(ctx, txKey{}, tc), tc) })
}

// Serialization retries: attempts and the backoff bound between them.
const (
	txAttempts   = 10
	txMaxBackoff = 50 * time.Millisecond
)

// atomic runs fn as one all-or-nothing step: in a new SERIALIZABLE
// transaction (retried on a serialization failure or deadlock), or inside
// the current one in a savepoint, so that a failed statement leaves the
// caller's transaction usable.
func (c *conn) atomic(ctx context.Context, fn func(tc *conn) error) error {
	c = c.bind(ctx)
	if c.tx != nil {
		sp, err := beginBounded(ctx, c.bound, c.tx.Begin)
		if err != nil {
			return dbErr("savepoint", err)
		}
		if err := fn(c.on(sp)); err != nil {
			rollbackBounded(ctx, c.bound, sp)
			return err
		}
		if err := commitBounded(ctx, c.bound, sp); err != nil {
			return dbErr("release savepoint", err)
		}
		return nil
	}
	var err error
	for attempt := range txAttempts {
		if err = c.runTx(ctx, fn); !retryable(err) {
			return err
		}
		backoff := min(time.Millisecond<<attempt, txMaxBackoff)
		select {
		case <-time.After(backoff/2 + rand.N(backoff/2+1)):
		case <-ctx.Done():
			return dbErr("retry transaction", ctx.Err())
		}
	}
	return fmt.Errorf("transaction kept losing serialization races: %w", err)
}

func (c *conn) runTx(ctx context.Context, fn func(tc *conn) error) (err error) {
	tx, err := beginBounded(ctx, c.bound, func(ctx context.Context) (pgx.Tx, error) {
		return c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	})
	if err != nil {
		return dbErr("begin", err)
	}
	defer func() {
		if p := recover(); p != nil {
			rollbackBounded(ctx, c.bound, tx)
			panic(p)
		}
	}()
	if err := fn(c.on(tx)); err != nil {
		rollbackBounded(ctx, c.bound, tx)
		return err
	}
	if err := commitBounded(ctx, c.bound, tx); err != nil {
		return dbErr("commit", err)
	}
	return nil
}

// step runs fn, whose statements are each atomic on their own: straight on
// the pool, or inside a transaction in a savepoint (see atomic).
func (c *conn) step(ctx context.Context, fn func(tc *conn) error) error {
	c = c.bind(ctx)
	if c.tx == nil {
		return fn(c)
	}
	return c.atomic(ctx, fn)
}

// exec runs one writing statement as a step and returns the rows it changed.
func (c *conn) exec(ctx context.Context, what, sql string, args ...any) (int64, error) {
	var n int64
	err := c.step(ctx, func(tc *conn) error {
		tag, err := tc.q.Exec(ctx, sql, args...)
		if err != nil {
			return dbErr(what, err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return n, err
}

// PostgreSQL error codes the store classifies.
const (
	codeUniqueViolation      = "23505"
	codeForeignKeyViolation  = "23503"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
)

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// unreachable reports whether err says the database cannot be reached or
// went away: a failed connect, a connection cut mid-statement (the server
// killed or restarted), or the server refusing work while it shuts down,
// starts or recovers (SQLSTATE class 08 and 57P01-57P03, 53300 too many
// connections). The API answers these 503, never as an internal error.
func unreachable(err error) bool {
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ENOENT):
		return true
	}
	code := pgCode(err)
	return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03" || code == "53300"
}

// retryable reports whether err is a transaction's lost serialization race.
func retryable(err error) bool {
	c := pgCode(err)
	return c == codeSerializationFailure || c == codeDeadlockDetected
}

// dbErr wraps a database error in its errdefs class. The server's message
// stays in the chain for logs; it is never an errdefs.Public.
func dbErr(what string, err error) error {
	switch {
	case errors.Is(err, errdefs.ErrUnavailable): // unanswered within the bound
		return fmt.Errorf("%s: %w", what, err)
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", what, errdefs.ErrNotFound)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrCancelled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrDeadlineExceeded, err)
	}
	if unreachable(err) {
		return fmt.Errorf("%s: database unreachable: %w: %w", what, errdefs.ErrUnavailable, err)
	}
	switch pgCode(err) {
	case codeUniqueViolation:
		return fmt.Errorf("%s: already exists: %w: %w", what, errdefs.ErrConflict, err)
	case codeForeignKeyViolation:
		return fmt.Errorf("%s: a referenced object does not exist: %w: %w", what, errdefs.ErrNotFound, err)
	case codeSerializationFailure, codeDeadlockDetected:
		return fmt.Errorf("%s: concurrent transactions collided: %w: %w", what, errdefs.ErrUnavailable, err)
	case "":
		if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
			return fmt.Errorf("%s: database unreachable: %w: %w", what, errdefs.ErrUnavailable, err)
		}
	}
	return fmt.Errorf("%s: %w: %w", what, errdefs.ErrInternal, err)
}
