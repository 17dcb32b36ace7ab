package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

func (c *conn) CreateEnvdToken(ctx context.Context, t *store.EnvdToken) error {
	c = c.bind(ctx)
	if err := storecodec.PrepareEnvdToken(t); err != nil {
		return err
	}
	if _, err := c.wr.ExecContext(ctx, `INSERT INTO envd_tokens (sandbox_id, hash, tenant_id, created_at) VALUES (?, ?, ?, ?)`,
		t.SandboxID, t.Hash, t.TenantID, storecodec.Nanos(t.CreatedAt)); err != nil {
		return dbErr("create envd token", err)
	}
	return nil
}

func (c *conn) GetEnvdToken(ctx context.Context, sandboxID, hash string) (*store.EnvdToken, error) {
	c = c.bind(ctx)
	t := &store.EnvdToken{SandboxID: sandboxID, Hash: hash}
	var created int64
	err := c.rd.QueryRowContext(ctx, `SELECT tenant_id, created_at FROM envd_tokens WHERE sandbox_id = ? AND hash = ?`,
		sandboxID, hash).Scan(&t.TenantID, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "envd token not found")
	}
	if err != nil {
		return nil, dbErr("get envd token", err)
	}
	t.CreatedAt = storecodec.FromNanos(created)
	return t, nil
}
