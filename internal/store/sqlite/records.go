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

func (c *conn) PutIdempotencyRecord(ctx context.Context, rec *store.IdempotencyRecord) (*store.IdempotencyRecord, bool, error) {
	c = c.bind(ctx)
	if err := storecodec.PrepareIdempotencyRecord(rec); err != nil {
		return nil, false, err
	}
	var stored *store.IdempotencyRecord
	var inserted bool
	err := c.atomic(ctx, func(tc *conn) error {
		res, err := tc.wr.ExecContext(ctx, `INSERT INTO idempotency (`+storecodec.IdempotencyColumns+`) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (tenant_id, key) DO NOTHING`,
			rec.TenantID, rec.Key, rec.RequestHash, rec.Status, rec.Body, storecodec.Nanos(rec.CreatedAt))
		if err != nil {
			return dbErr("put idempotency record", err)
		}
		n, _ := res.RowsAffected()
		inserted = n == 1
		stored, err = tc.GetIdempotencyRecord(ctx, rec.TenantID, rec.Key)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return stored, inserted, nil
}

func (c *conn) GetIdempotencyRecord(ctx context.Context, tenantID, key string) (*store.IdempotencyRecord, error) {
	c = c.bind(ctx)
	r, err := storecodec.ScanIdempotencyRecord(c.rd.QueryRowContext(ctx, `SELECT `+storecodec.IdempotencyColumns+` FROM idempotency WHERE tenant_id = ? AND key = ?`, tenantID, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "idempotency key not found")
	}
	if err != nil {
		return nil, dbErr("get idempotency record", err)
	}
	return r, nil
}

func (c *conn) CompleteIdempotencyRecord(ctx context.Context, tenantID, key string, status int, body []byte) error {
	c = c.bind(ctx)
	res, err := c.wr.ExecContext(ctx, `UPDATE idempotency SET status = ?, body = ? WHERE tenant_id = ? AND key = ?`,
		status, body, tenantID, key)
	if err != nil {
		return dbErr("complete idempotency record", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.New(errdefs.ErrNotFound, "idempotency key not found")
	}
	return nil
}

func (c *conn) DeleteIdempotencyRecord(ctx context.Context, tenantID, key string) error {
	c = c.bind(ctx)
	if _, err := c.wr.ExecContext(ctx, `DELETE FROM idempotency WHERE tenant_id = ? AND key = ?`, tenantID, key); err != nil {
		return dbErr("delete idempotency record", err)
	}
	return nil
}

func (c *conn) PruneIdempotencyRecords(ctx context.Context, before time.Time) (int, error) {
	c = c.bind(ctx)
	res, err := c.wr.ExecContext(ctx, `DELETE FROM idempotency WHERE created_at < ?`, storecodec.Nanos(before))
	if err != nil {
		return 0, dbErr("prune idempotency records", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// UpsertTemplate inserts or replaces t by ID, filling ID and CreatedAt when empty.
func (c *conn) UpsertTemplate(ctx context.Context, t *store.Template) error {
	c = c.bind(ctx)
	if err := storecodec.PrepareTemplate(t); err != nil {
		return err
	}
	_, err := c.wr.ExecContext(ctx, `INSERT INTO templates (`+storecodec.TemplateColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name, digest = excluded.digest, state = excluded.state,
		size_bytes = excluded.size_bytes, defaults = excluded.defaults, created_at = excluded.created_at,
		tenant_id = excluded.tenant_id`,
		t.ID, t.Name, t.Digest, string(t.State), t.SizeBytes, storecodec.RawText(t.Defaults), storecodec.Nanos(t.CreatedAt), t.TenantID)
	if err != nil {
		return dbErr("upsert template", err)
	}
	return nil
}

func (c *conn) GetTemplate(ctx context.Context, id string) (*store.Template, error) {
	c = c.bind(ctx)
	t, err := storecodec.ScanTemplate(c.rd.QueryRowContext(ctx, `SELECT `+storecodec.TemplateColumns+` FROM templates WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, storecodec.NotFound("template", id)
	}
	if err != nil {
		return nil, dbErr("get template", err)
	}
	return t, nil
}

func (c *conn) GetTemplateByName(ctx context.Context, name, digest string) (*store.Template, error) {
	c = c.bind(ctx)
	var row *sql.Row
	if digest != "" {
		row = c.rd.QueryRowContext(ctx, `SELECT `+storecodec.TemplateColumns+` FROM templates WHERE name = ? AND digest = ?`, name, digest)
	} else {
		row = c.rd.QueryRowContext(ctx, `SELECT `+storecodec.TemplateColumns+` FROM templates WHERE name = ? AND state = ?
			ORDER BY created_at DESC, id DESC LIMIT 1`, name, string(store.TemplateReady))
	}
	t, err := storecodec.ScanTemplate(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, storecodec.NotFound("template", name)
	}
	if err != nil {
		return nil, dbErr("get template", err)
	}
	return t, nil
}

func (c *conn) ListTemplates(ctx context.Context) ([]*store.Template, error) {
	return collect(ctx, c.bind(ctx).rd, "list templates", storecodec.ScanTemplate, `SELECT `+storecodec.TemplateColumns+` FROM templates ORDER BY name, created_at, id`)
}

func (c *conn) DeleteTemplate(ctx context.Context, id string) error {
	c = c.bind(ctx)
	res, err := c.wr.ExecContext(ctx, `DELETE FROM templates WHERE id = ?`, id)
	if err != nil {
		return dbErr("delete template", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return storecodec.NotFound("template", id)
	}
	return nil
}
