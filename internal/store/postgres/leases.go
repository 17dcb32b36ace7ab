package postgres

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// Operation leases run on the database's clock, so replicas whose clocks
// disagree still agree on whether a lease has expired. clockNanos is that
// clock in Unix nanoseconds (microsecond resolution).
const clockNanos = `((EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint * 1000)`

// unfinished is the state condition of an operation that can be leased.
const unfinished = `state IN ('pending', 'running')`

// opColsOf is storecodec.OperationColumns qualified by table, for statements joining another.
func opColsOf(table string) string {
	cols := strings.Split(storecodec.OperationColumns, ",")
	for i, c := range cols {
		cols[i] = table + "." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// ClaimOperation gives the operation to owner for ttl when its lease is free.
// The UPDATE takes the row lock and re-checks the lease after a concurrent
// claim commits, so of racing claimers one wins.
func (c *conn) ClaimOperation(ctx context.Context, id, owner string, ttl time.Duration) (*store.Operation, error) {
	if err := storecodec.ValidLease(owner, ttl); err != nil {
		return nil, err
	}
	var out *store.Operation
	err := c.step(ctx, func(tc *conn) error {
		op, err := storecodec.ScanOperation(tc.q.QueryRow(ctx, `UPDATE operations SET lease_owner = $2, lease_expires_at = clock.ns + $3
			FROM (SELECT `+clockNanos+` AS ns) AS clock
			WHERE id = $1 AND `+unfinished+` AND (lease_owner = '' OR lease_owner = $2 OR lease_expires_at < clock.ns)
			RETURNING `+opColsOf("operations"), id, owner, ttl.Nanoseconds()))
		if err == nil {
			out = op
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return dbErr("claim operation", err)
		}
		cur, err := tc.GetOperation(ctx, store.AnyTenant, id)
		if err != nil {
			return err
		}
		return storecodec.LeaseConflict(cur)
	})
	return out, err
}

// RenewOperationLeases extends owner's leases of ids and returns those it holds.
func (c *conn) RenewOperationLeases(ctx context.Context, owner string, ids []string, ttl time.Duration) ([]string, error) {
	if err := storecodec.ValidLease(owner, ttl); err != nil {
		return nil, err
	}
	held := []string{}
	if len(ids) == 0 {
		return held, nil
	}
	err := c.step(ctx, func(tc *conn) error {
		got, err := collect(ctx, tc, "renew operation leases", func(row storecodec.Row) (string, error) {
			var id string
			err := row.Scan(&id)
			return id, err
		}, `UPDATE operations SET lease_expires_at = `+clockNanos+` + $3
			WHERE lease_owner = $1 AND id = ANY($2) AND `+unfinished+` RETURNING id`, owner, ids, ttl.Nanoseconds())
		held = append(held, got...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return held, nil
}

// ClaimExpiredOperations claims up to limit operations whose lease is free,
// oldest first. Rows another claimer has locked are skipped (SKIP LOCKED),
// so concurrent claimers take disjoint sets without waiting on each other.
func (c *conn) ClaimExpiredOperations(ctx context.Context, owner string, ttl time.Duration, limit int) ([]*store.Operation, error) {
	if err := storecodec.ValidLease(owner, ttl); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "limit must be positive")
	}
	var out []*store.Operation
	err := c.step(ctx, func(tc *conn) error {
		var err error
		out, err = collect(ctx, tc, "claim expired operations", storecodec.ScanOperation, `WITH clock AS (SELECT `+clockNanos+` AS ns),
			free AS (
				SELECT o.id FROM operations o, clock
				WHERE o.state IN ('pending', 'running') AND (o.lease_owner = '' OR o.lease_expires_at < clock.ns)
				ORDER BY o.created_at, o.id LIMIT $3
				FOR NO KEY UPDATE OF o SKIP LOCKED)
			UPDATE operations SET lease_owner = $1, lease_expires_at = (SELECT ns FROM clock) + $2
			FROM free WHERE operations.id = free.id
			RETURNING `+opColsOf("operations"), owner, ttl.Nanoseconds(), limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.CreatedAt.Before(b.CreatedAt) || (a.CreatedAt.Equal(b.CreatedAt) && a.ID < b.ID)
	})
	return out, nil
}

// StartOperation moves owner's pending operation to running unless another
// operation on its target runs. The check and the write are one
// SERIALIZABLE transaction: of two starters on one target, each reading
// that the other has not started, one loses the serialization race, is
// run again and finds the other's start (the holder).
func (c *conn) StartOperation(ctx context.Context, id, owner string) (started, holder *store.Operation, err error) {
	err = c.atomic(ctx, func(tc *conn) error {
		started, holder = nil, nil
		op, err := tc.getOperation(ctx, store.AnyTenant, id, " FOR NO KEY UPDATE")
		if err != nil {
			return err
		}
		if err := storecodec.StartConflict(op, owner); err != nil {
			return err
		}
		h, err := storecodec.ScanOperation(tc.q.QueryRow(ctx, `SELECT `+storecodec.OperationColumns+` FROM operations
			WHERE target = $1 AND state = 'running' AND id <> $2 ORDER BY created_at, id LIMIT 1`, op.Target, op.ID))
		switch {
		case err == nil:
			holder = h
			return nil
		case !errors.Is(err, pgx.ErrNoRows):
			return dbErr("find the running operation of a target", err)
		}
		started, err = tc.TransitionOperation(ctx, id, []store.OperationState{store.OpPending}, store.OpRunning, nil)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return started, holder, nil
}
