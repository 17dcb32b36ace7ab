package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/space-sandbox/space/internal/errdefs"
)

// DefaultStatementTimeout bounds each statement (and each begin, commit
// and savepoint) the store sends, for callers whose context has no
// earlier deadline: an API request has none, and a database that stops
// answering without closing its connections (a frozen server, a host
// gone silent behind a live TCP peer) would otherwise hang it forever.
// The store's statements are single-row reads and writes and short pages;
// none comes near it. A write the bound gave up on may still commit once
// the server answers again: unavailable means its outcome is unknown, as
// for any connection cut mid-statement.
const DefaultStatementTimeout = 15 * time.Second

// errUnanswered is the cause of a statement's context when its bound, not
// its caller, ended it.
var errUnanswered = errors.New("the database did not answer in time")

// boundedQuerier runs every statement of q under the store's bound, and
// reports a statement the bound ended as unavailable.
type boundedQuerier struct {
	q     querier
	bound time.Duration
}

// within returns ctx bounded by d unless it ends sooner already.
func within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, d, errUnanswered)
}

// unanswered turns err into an unavailable error when ctx was ended by the
// store's bound rather than by its caller.
func unanswered(ctx context.Context, err error, d time.Duration) error {
	if err == nil || !errors.Is(context.Cause(ctx), errUnanswered) {
		return err
	}
	return fmt.Errorf("the database did not answer within %s: %w: %w", d, errdefs.ErrUnavailable, err)
}

func (b boundedQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	ctx, cancel := within(ctx, b.bound)
	defer cancel()
	tag, err := b.q.Exec(ctx, sql, args...)
	return tag, unanswered(ctx, err, b.bound)
}

// Query's bound lasts until the rows are closed: pgx reads them on the
// context of the query.
func (b boundedQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	ctx, cancel := within(ctx, b.bound)
	rows, err := b.q.Query(ctx, sql, args...)
	if err != nil {
		cancel()
		return nil, unanswered(ctx, err, b.bound)
	}
	return &boundedRows{Rows: rows, ctx: ctx, cancel: cancel, bound: b.bound}, nil
}

func (b boundedQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	ctx, cancel := within(ctx, b.bound)
	return &boundedRow{row: b.q.QueryRow(ctx, sql, args...), ctx: ctx, cancel: cancel, bound: b.bound}
}

type boundedRows struct {
	pgx.Rows
	ctx    context.Context
	cancel context.CancelFunc
	bound  time.Duration
}

func (r *boundedRows) Close() {
	r.Rows.Close()
	r.cancel()
}

func (r *boundedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.cancel() // pgx closed the rows after the last one
	return false
}

func (r *boundedRows) Err() error { return unanswered(r.ctx, r.Rows.Err(), r.bound) }

func (r *boundedRows) Scan(dest ...any) error {
	return unanswered(r.ctx, r.Rows.Scan(dest...), r.bound)
}

type boundedRow struct {
	row    pgx.Row
	ctx    context.Context
	cancel context.CancelFunc
	bound  time.Duration
}

func (r *boundedRow) Scan(dest ...any) error {
	defer r.cancel()
	return unanswered(r.ctx, r.row.Scan(dest...), r.bound)
}

// beginBounded starts a transaction (or a savepoint, on a transaction)
// under the bound.
func beginBounded(ctx context.Context, d time.Duration, begin func(ctx context.Context) (pgx.Tx, error)) (pgx.Tx, error) {
	bctx, cancel := within(ctx, d)
	defer cancel()
	tx, err := begin(bctx)
	return tx, unanswered(bctx, err, d)
}

// commitBounded commits tx under the bound.
func commitBounded(ctx context.Context, d time.Duration, tx pgx.Tx) error {
	bctx, cancel := within(ctx, d)
	defer cancel()
	return unanswered(bctx, tx.Commit(bctx), d)
}

// rollbackBounded rolls tx back under the bound, also when ctx has ended
// (the rollback is what ends the transaction's hold on the database).
func rollbackBounded(ctx context.Context, d time.Duration, tx pgx.Tx) {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	_ = tx.Rollback(bctx)
}

// Option configures Open.
type Option func(*options)

type options struct{ statementTimeout time.Duration }

// WithStatementTimeout sets the bound of each statement (default
// DefaultStatementTimeout).
func WithStatementTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.statementTimeout = d
		}
	}
}
