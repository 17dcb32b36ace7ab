package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

func (c *conn) CreatePortToken(ctx context.Context, t *store.PortToken) error {
	c = c.bind(ctx)
	if err := storecodec.PreparePortToken(t); err != nil {
		return err
	}
	if _, err := c.wr.ExecContext(ctx, `INSERT INTO port_tokens (`+storecodec.PortTokenColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		storecodec.PortTokenArgs(t)...); err != nil {
		return dbErr("create port token", err)
	}
	return nil
}

func (c *conn) GetPortTokenByHash(ctx context.Context, sandboxID, hash string) (*store.PortToken, error) {
	c = c.bind(ctx)
	if hash == "" {
		return nil, errdefs.New(errdefs.ErrNotFound, "port token not found")
	}
	t, err := storecodec.ScanPortToken(c.rd.QueryRowContext(ctx, `SELECT `+storecodec.PortTokenColumns+
		` FROM port_tokens WHERE sandbox_id = ? AND hash = ?`, sandboxID, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "port token not found")
	}
	if err != nil {
		return nil, dbErr("get port token", err)
	}
	return t, nil
}

func (c *conn) ListPortTokens(ctx context.Context, sandboxID string) ([]*store.PortToken, error) {
	c = c.bind(ctx)
	return collect(ctx, c.rd, "list port tokens", storecodec.ScanPortToken, `SELECT `+storecodec.PortTokenColumns+
		` FROM port_tokens WHERE sandbox_id = ? ORDER BY created_at, id`, sandboxID)
}

func (c *conn) DeletePortTokens(ctx context.Context, sandboxID string) error {
	c = c.bind(ctx)
	if _, err := c.wr.ExecContext(ctx, `DELETE FROM port_tokens WHERE sandbox_id = ?`, sandboxID); err != nil {
		return dbErr("delete port tokens", err)
	}
	return nil
}
