package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// CreateCheckpoint inserts c, filling ID and CreatedAt when empty.
func (c *conn) CreateCheckpoint(ctx context.Context, ck *store.Checkpoint) error {
	c = c.bind(ctx)
	if err := storecodec.PrepareCheckpoint(ck); err != nil {
		return err
	}
	_, err := c.wr.ExecContext(ctx, `INSERT INTO checkpoints (`+storecodec.CheckpointColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, storecodec.CheckpointArgs(ck)...)
	if err != nil {
		return dbErr("create checkpoint", err)
	}
	return nil
}

func (c *conn) GetCheckpoint(ctx context.Context, tenantID, id string) (*store.Checkpoint, error) {
	c = c.bind(ctx)
	ck, err := storecodec.ScanCheckpoint(c.rd.QueryRowContext(ctx, `SELECT `+storecodec.CheckpointColumns+` FROM checkpoints
		WHERE id = ? AND (? = '' OR tenant_id = ?)`, id, tenantID, tenantID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, storecodec.NotFound("checkpoint", id)
	}
	if err != nil {
		return nil, dbErr("get checkpoint", err)
	}
	return ck, nil
}

func (c *conn) ListCheckpoints(ctx context.Context, f store.CheckpointFilter) (store.Page[*store.Checkpoint], error) {
	q := pageQuery{what: "list checkpoints", cols: storecodec.CheckpointColumns, table: "checkpoints", PageRequest: f.PageRequest}
	if f.TenantID != "" {
		q.filter("tenant_id = ?", f.TenantID)
	}
	if f.SandboxID != "" {
		q.filter("sandbox_id = ?", f.SandboxID)
	}
	return listPage(ctx, c.bind(ctx), q, storecodec.ScanCheckpoint, func(ck *store.Checkpoint) (time.Time, string) { return ck.CreatedAt, ck.ID })
}

// UpdateCheckpoint compares the state, applies mutate and writes, in one
// transaction.
func (c *conn) UpdateCheckpoint(ctx context.Context, id string, from []store.CheckpointState,
	mutate func(*store.Checkpoint) error) (*store.Checkpoint, error) {
	c = c.bind(ctx)
	var out *store.Checkpoint
	err := c.atomic(ctx, func(tc *conn) error {
		ck, err := tc.GetCheckpoint(ctx, store.AnyTenant, id)
		if err != nil {
			return err
		}
		if err := storecodec.ChangeCheckpoint(ck, from, mutate); err != nil {
			return err
		}
		args := storecodec.CheckpointArgs(ck)[3:] // after id, tenant_id, sandbox_id
		args = append(args[:len(args)-1], ck.ID)
		_, err = tc.wr.ExecContext(ctx, `UPDATE checkpoints SET name = ?, parent = ?, state = ?, template = ?,
			template_digest = ?, vcpus = ?, memory_mib = ?, disk_mib = ?, worker = ?, size_bytes = ? WHERE id = ?`, args...)
		if err != nil {
			return dbErr(fmt.Sprintf("update checkpoint %s", id), err)
		}
		out = ck
		return nil
	})
	return out, err
}

func (c *conn) DeleteCheckpoint(ctx context.Context, tenantID, id string) error {
	c = c.bind(ctx)
	res, err := c.wr.ExecContext(ctx, `DELETE FROM checkpoints WHERE id = ? AND (? = '' OR tenant_id = ?)`, id, tenantID, tenantID)
	if err != nil {
		return dbErr("delete checkpoint", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return storecodec.NotFound("checkpoint", id)
	}
	return nil
}
