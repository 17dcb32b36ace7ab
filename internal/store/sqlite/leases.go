package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// Operation leases. SQLite serves one node, so the store's clock is this
// process's, and the one writer connection makes every claim exclusive.

// leaseFree is the condition of an unfinished operation whose lease the
// owner in the first argument may take; the second is the time now.
const leaseFree = `state IN ('pending', 'running') AND (lease_owner = '' OR lease_owner = ? OR lease_expires_at < ?)`

// ClaimOperation gives the operation to owner for ttl when its lease is free.
func (c *conn) ClaimOperation(ctx context.Context, id, owner string, ttl time.Duration) (*store.Operation, error) {
	if err := storecodec.ValidLease(owner, ttl); err != nil {
		return nil, err
	}
	var out *store.Operation
	err := c.atomic(ctx, func(tc *conn) error {
		t := storecodec.Now()
		res, err := tc.wr.ExecContext(ctx, `UPDATE operations SET lease_owner = ?, lease_expires_at = ? WHERE id = ? AND `+leaseFree,
			owner, storecodec.Nanos(t.Add(ttl)), id, owner, storecodec.Nanos(t))
		if err != nil {
			return dbErr("claim operation", err)
		}
		op, err := tc.GetOperation(ctx, store.AnyTenant, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			out = op
			return nil
		}
		return storecodec.LeaseConflict(op)
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
	err := c.atomic(ctx, func(tc *conn) error {
		t := storecodec.Now()
		for start := 0; start < len(ids); start += renewChunk {
			chunk := ids[start:min(start+renewChunk, len(ids))]
			args := []any{storecodec.Nanos(t.Add(ttl)), owner}
			for _, id := range chunk {
				args = append(args, id)
			}
			got, err := collect(ctx, tc.wr, "renew operation leases", func(row storecodec.Row) (string, error) {
				var id string
				err := row.Scan(&id)
				return id, err
			}, `UPDATE operations SET lease_expires_at = ?
				WHERE lease_owner = ? AND state IN ('pending', 'running') AND id IN (`+placeholders(len(chunk))+`) RETURNING id`, args...)
			if err != nil {
				return err
			}
			held = append(held, got...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return held, nil
}

// renewChunk bounds the ids of one statement (SQLite's variable limit).
const renewChunk = 500

// ClaimExpiredOperations claims up to limit operations whose lease is free,
// oldest first.
func (c *conn) ClaimExpiredOperations(ctx context.Context, owner string, ttl time.Duration, limit int) ([]*store.Operation, error) {
	if err := storecodec.ValidLease(owner, ttl); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "limit must be positive")
	}
	var out []*store.Operation
	err := c.atomic(ctx, func(tc *conn) error {
		t := storecodec.Now()
		var err error
		out, err = collect(ctx, tc.wr, "claim expired operations", storecodec.ScanOperation, `SELECT `+storecodec.OperationColumns+` FROM operations
			WHERE state IN ('pending', 'running') AND (lease_owner = '' OR lease_expires_at < ?)
			ORDER BY created_at, id LIMIT ?`, storecodec.Nanos(t), limit)
		if err != nil {
			return err
		}
		expires := t.Add(ttl)
		for _, op := range out {
			if _, err := tc.wr.ExecContext(ctx, `UPDATE operations SET lease_owner = ?, lease_expires_at = ? WHERE id = ?`,
				owner, storecodec.Nanos(expires), op.ID); err != nil {
				return dbErr("claim expired operations", err)
			}
			op.LeaseOwner, op.LeaseExpiresAt = owner, storecodec.FromNanos(storecodec.Nanos(expires))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// StartOperation moves owner's pending operation to running unless another
// operation on its target runs (the one writer connection makes the check
// and the write one step).
func (c *conn) StartOperation(ctx context.Context, id, owner string) (started, holder *store.Operation, err error) {
	err = c.atomic(ctx, func(tc *conn) error {
		op, err := tc.GetOperation(ctx, store.AnyTenant, id)
		if err != nil {
			return err
		}
		if err := storecodec.StartConflict(op, owner); err != nil {
			return err
		}
		h, err := storecodec.ScanOperation(tc.rd.QueryRowContext(ctx, `SELECT `+storecodec.OperationColumns+` FROM operations
			WHERE target = ? AND state = 'running' AND id <> ? ORDER BY created_at, id LIMIT 1`, op.Target, op.ID))
		switch {
		case err == nil:
			holder = h
			return nil
		case !errors.Is(err, sql.ErrNoRows):
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
