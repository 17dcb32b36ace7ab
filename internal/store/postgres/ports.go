package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

func (c *conn) CreatePortToken(ctx context.Context, t *store.PortToken) error {
	if err := storecodec.PreparePortToken(t); err != nil {
		return err
	}
	_, err := c.exec(ctx, "create port token", `INSERT INTO port_tokens (`+storecodec.PortTokenColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, storecodec.PortTokenArgs(t)...)
	return err
}

func (c *conn) GetPortTokenByHash(ctx context.Context, sandboxID, hash string) (*store.PortToken, error) {
	c = c.bind(ctx)
	if hash == "" {
		return nil, errdefs.New(errdefs.ErrNotFound, "port token not found")
	}
	t, err := storecodec.ScanPortToken(c.q.QueryRow(ctx, `SELECT `+storecodec.PortTokenColumns+
		` FROM port_tokens WHERE sandbox_id = $1 AND hash = $2`, sandboxID, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "port token not found")
	}
	if err != nil {
		return nil, dbErr("get port token", err)
	}
	return t, nil
}

func (c *conn) ListPortTokens(ctx context.Context, sandboxID string) ([]*store.PortToken, error) {
	c = c.bind(ctx)
	return collect(ctx, c, "list port tokens", storecodec.ScanPortToken, `SELECT `+storecodec.PortTokenColumns+
		` FROM port_tokens WHERE sandbox_id = $1 ORDER BY created_at, id`, sandboxID)
}

func (c *conn) DeletePortTokens(ctx context.Context, sandboxID string) error {
	_, err := c.exec(ctx, "delete port tokens", `DELETE FROM port_tokens WHERE sandbox_id = $1`, sandboxID)
	return err
}
