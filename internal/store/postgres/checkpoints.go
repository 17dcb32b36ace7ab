package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// CreateCheckpoint inserts c, filling ID and CreatedAt when empty.
func (c *conn) CreateCheckpoint(ctx context.Context, ck *store.Checkpoint) error {
	if err := storecodec.PrepareCheckpoint(ck); err != nil {
		return err
	}
	_, err := c.exec(ctx, "create checkpoint", `INSERT INTO checkpoints (`+storecodec.CheckpointColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`, storecodec.CheckpointArgs(ck)...)
	return err
}

func (c *conn) GetCheckpoint(ctx context.Context, tenantID, id string) (*store.Checkpoint, error) {
	return c.getCheckpoint(ctx, tenantID, id, "")
}

func (c *conn) getCheckpoint(ctx context.Context, tenantID, id, lock string) (*store.Checkpoint, error) {
	c = c.bind(ctx)
	ck, err := storecodec.ScanCheckpoint(c.q.QueryRow(ctx, `SELECT `+storecodec.CheckpointColumns+` FROM checkpoints
		WHERE id = $1 AND ($2 = '' OR tenant_id = $2)`+lock, id, tenantID))
	if errors.Is(err, pgx.ErrNoRows) {
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
		q.filter("tenant_id = " + q.arg(f.TenantID))
	}
	if f.SandboxID != "" {
		q.filter("sandbox_id = " + q.arg(f.SandboxID))
	}
	return listPage(ctx, c.bind(ctx), q, storecodec.ScanCheckpoint, func(ck *store.Checkpoint) (time.Time, string) { return ck.CreatedAt, ck.ID })
}

// UpdateCheckpoint locks the row, compares the state, applies mutate and
// writes, in one transaction.
func (c *conn) UpdateCheckpoint(ctx context.Context, id string, from []store.CheckpointState,
	mutate func(*store.Checkpoint) error) (*store.Checkpoint, error) {
	var out *store.Checkpoint
	err := c.atomic(ctx, func(tc *conn) error {
		ck, err := tc.getCheckpoint(ctx, store.AnyTenant, id, " FOR NO KEY UPDATE")
		if err != nil {
			return err
		}
		if err := storecodec.ChangeCheckpoint(ck, from, mutate); err != nil {
			return err
		}
		a := storecodec.CheckpointArgs(ck)[3:] // after id, tenant_id, sandbox_id
		a = append(a[:len(a)-1], ck.ID)
		_, err = tc.q.Exec(ctx, `UPDATE checkpoints SET name = $1, parent = $2, state = $3, template = $4,
			template_digest = $5, vcpus = $6, memory_mib = $7, disk_mib = $8, worker = $9, size_bytes = $10 WHERE id = $11`, a...)
		if err != nil {
			return dbErr(fmt.Sprintf("update checkpoint %s", id), err)
		}
		out = ck
		return nil
	})
	return out, err
}

func (c *conn) DeleteCheckpoint(ctx context.Context, tenantID, id string) error {
	n, err := c.exec(ctx, "delete checkpoint", `DELETE FROM checkpoints WHERE id = $1 AND ($2 = '' OR tenant_id = $2)`, id, tenantID)
	if err != nil {
		return err
	}
	if n == 0 {
		return storecodec.NotFound("checkpoint", id)
	}
	return nil
}
