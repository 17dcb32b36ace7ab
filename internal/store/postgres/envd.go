package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

func (c *conn) CreateEnvdToken(ctx context.Context, t *store.EnvdToken) error {
	if err := storecodec.PrepareEnvdToken(t); err != nil {
		return err
	}
	_, err := c.exec(ctx, "create envd token", `INSERT INTO envd_tokens (sandbox_id, hash, tenant_id, created_at) VALUES ($1, $2, $3, $4)`,
		t.SandboxID, t.Hash, t.TenantID, storecodec.Nanos(t.CreatedAt))
	return err
}

func (c *conn) GetEnvdToken(ctx context.Context, sandboxID, hash string) (*store.EnvdToken, error) {
	c = c.bind(ctx)
	t := &store.EnvdToken{SandboxID: sandboxID, Hash: hash}
	var created int64
	err := c.q.QueryRow(ctx, `SELECT tenant_id, created_at FROM envd_tokens WHERE sandbox_id = $1 AND hash = $2`,
		sandboxID, hash).Scan(&t.TenantID, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "envd token not found")
	}
	if err != nil {
		return nil, dbErr("get envd token", err)
	}
	t.CreatedAt = storecodec.FromNanos(created)
	return t, nil
}
