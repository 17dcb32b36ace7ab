package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// CreateOperation inserts op, filling ID, State (pending), CreatedAt and
// UpdatedAt when empty.
func (c *conn) CreateOperation(ctx context.Context, op *store.Operation) error {
	c = c.bind(ctx)
	if err := storecodec.PrepareOperation(op); err != nil {
		return err
	}
	_, err := c.wr.ExecContext(ctx, `INSERT INTO operations (`+storecodec.OperationColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '', 0)`,
		op.ID, op.TenantID, string(op.Type), op.Target, string(op.State), storecodec.JSONText(op.Progress), storecodec.JSONText(op.Error),
		storecodec.RawText(op.Result), storecodec.RawText(op.Params), storecodec.Nanos(op.CreatedAt), storecodec.Nanos(op.UpdatedAt), storecodec.NullNanos(op.DoneAt))
	if err != nil {
		return dbErr("create operation", err)
	}
	return nil
}

func (c *conn) GetOperation(ctx context.Context, tenantID, id string) (*store.Operation, error) {
	c = c.bind(ctx)
	op, err := storecodec.ScanOperation(c.rd.QueryRowContext(ctx, `SELECT `+storecodec.OperationColumns+` FROM operations WHERE id = ? AND (? = '' OR tenant_id = ?)`,
		id, tenantID, tenantID))
	if errors.Is(err, sql.ErrNoRows) {
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
		q.filter("tenant_id = ?", f.TenantID)
	}
	if f.Target != "" {
		q.filter("target = ?", f.Target)
	}
	return listPage(ctx, c.bind(ctx), q, storecodec.ScanOperation, func(op *store.Operation) (time.Time, string) { return op.CreatedAt, op.ID })
}

func (c *conn) TransitionOperation(ctx context.Context, id string, from []store.OperationState, to store.OperationState,
	mutate func(*store.Operation) error) (*store.Operation, error) {
	c = c.bind(ctx)
	var out *store.Operation
	err := c.atomic(ctx, func(tc *conn) error {
		op, err := tc.GetOperation(ctx, store.AnyTenant, id)
		if err != nil {
			return err
		}
		if err := storecodec.ChangeOperation(op, from, to, mutate); err != nil {
			return err
		}
		_, err = tc.wr.ExecContext(ctx, `UPDATE operations SET type = ?, target = ?, state = ?, progress = ?, error = ?,
			result = ?, params = ?, updated_at = ?, done_at = ? WHERE id = ?`,
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
	return collect(ctx, c.bind(ctx).rd, "list unfinished operations", storecodec.ScanOperation, `SELECT `+storecodec.OperationColumns+` FROM operations WHERE state IN ('pending', 'running')
		ORDER BY created_at, id`)
}
