package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// CreateOperation inserts op, filling ID, State (pending), CreatedAt and
// UpdatedAt when empty. It has no lease until ClaimOperation.
func (c *conn) CreateOperation(ctx context.Context, op *store.Operation) error {
	if err := storecodec.PrepareOperation(op); err != nil {
		return err
	}
	_, err := c.exec(ctx, "create operation", `INSERT INTO operations (`+storecodec.OperationColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, '', 0)`,
		op.ID, op.TenantID, string(op.Type), op.Target, string(op.State), storecodec.JSONText(op.Progress), storecodec.JSONText(op.Error),
		storecodec.RawText(op.Result), storecodec.RawText(op.Params), storecodec.Nanos(op.CreatedAt), storecodec.Nanos(op.UpdatedAt), storecodec.NullNanos(op.DoneAt))
	return err
}

func (c *conn) GetOperation(ctx context.Context, tenantID, id string) (*store.Operation, error) {
	return c.getOperation(ctx, tenantID, id, "")
}

func (c *conn) getOperation(ctx context.Context, tenantID, id, lock string) (*store.Operation, error) {
	c = c.bind(ctx)
	op, err := storecodec.ScanOperation(c.q.QueryRow(ctx, `SELECT `+storecodec.OperationColumns+` FROM operations WHERE id = $1 AND ($2 = '' OR tenant_id = $2)`+lock,
		id, tenantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, storecodec.NotFound("operation", id)
	}
	if err != nil {
		return nil, dbErr("get operation", err)
	}
	return op, nil
}

func (c *conn) ListOperations(ctx context.Context, f store.OperationFilter) (store.Page[*store.Operation], error) {
	q := pageQuery{what: "list operations", cols: storecodec.OperationColumns, table: "operations", newest: true, PageRequest: f.PageRequest}
	if f.TenantID != "" {
		q.filter("tenant_id = " + q.arg(f.TenantID))
	}
	if f.Target != "" {
		q.filter("target = " + q.arg(f.Target))
	}
	return listPage(ctx, c.bind(ctx), q, storecodec.ScanOperation, func(op *store.Operation) (time.Time, string) { return op.CreatedAt, op.ID })
}

// TransitionOperation locks the row, compares the state, applies mutate and
// writes, in one transaction. The lease stays as it is.
func (c *conn) TransitionOperation(ctx context.Context, id string, from []store.OperationState, to store.OperationState,
	mutate func(*store.Operation) error) (*store.Operation, error) {
	var out *store.Operation
	err := c.atomic(ctx, func(tc *conn) error {
		op, err := tc.getOperation(ctx, store.AnyTenant, id, " FOR NO KEY UPDATE")
		if err != nil {
			return err
		}
		if err := storecodec.ChangeOperation(op, from, to, mutate); err != nil {
			return err
		}
		_, err = tc.q.Exec(ctx, `UPDATE operations SET type = $1, target = $2, state = $3, progress = $4, error = $5,
			result = $6, params = $7, updated_at = $8, done_at = $9 WHERE id = $10`,
			string(op.Type), op.Target, string(op.State), storecodec.JSONText(op.Progress), storecodec.JSONText(op.Error), storecodec.RawText(op.Result),
			storecodec.RawText(op.Params), storecodec.Nanos(op.UpdatedAt), storecodec.NullNanos(op.DoneAt), op.ID)
		if err != nil {
			return dbErr("update operation", err)
		}
		out = op
		return nil
	})
	return out, err
}

func (c *conn) ListUnfinishedOperations(ctx context.Context) ([]*store.Operation, error) {
	return collect(ctx, c.bind(ctx), "list unfinished operations", storecodec.ScanOperation,
		`SELECT `+storecodec.OperationColumns+` FROM operations WHERE state IN ('pending', 'running') ORDER BY created_at, id`)
}
