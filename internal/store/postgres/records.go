package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// PutIdempotencyRecord inserts rec unless its key exists. A concurrent
// insert of the same key waits for the first to commit and then does
// nothing, so exactly one caller inserts.
func (c *conn) PutIdempotencyRecord(ctx context.Context, rec *store.IdempotencyRecord) (*store.IdempotencyRecord, bool, error) {
	if err := storecodec.PrepareIdempotencyRecord(rec); err != nil {
		return nil, false, err
	}
	var stored *store.IdempotencyRecord
	var inserted bool
	err := c.step(ctx, func(tc *conn) error {
		tag, err := tc.q.Exec(ctx, `INSERT INTO idempotency (`+storecodec.IdempotencyColumns+`) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (tenant_id, key) DO NOTHING`,
			rec.TenantID, rec.Key, rec.RequestHash, rec.Status, rec.Body, storecodec.Nanos(rec.CreatedAt))
		if err != nil {
			return dbErr("put idempotency record", err)
		}
		inserted = tag.RowsAffected() == 1
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
	r, err := storecodec.ScanIdempotencyRecord(c.q.QueryRow(ctx, `SELECT `+storecodec.IdempotencyColumns+` FROM idempotency WHERE tenant_id = $1 AND key = $2`, tenantID, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "idempotency key not found")
	}
	if err != nil {
		return nil, dbErr("get idempotency record", err)
	}
	return r, nil
}

func (c *conn) CompleteIdempotencyRecord(ctx context.Context, tenantID, key string, status int, body []byte) error {
	n, err := c.exec(ctx, "complete idempotency record", `UPDATE idempotency SET status = $1, body = $2 WHERE tenant_id = $3 AND key = $4`,
		status, body, tenantID, key)
	if err != nil {
		return err
	}
	if n == 0 {
		return errdefs.New(errdefs.ErrNotFound, "idempotency key not found")
	}
	return nil
}

func (c *conn) DeleteIdempotencyRecord(ctx context.Context, tenantID, key string) error {
	_, err := c.exec(ctx, "delete idempotency record", `DELETE FROM idempotency WHERE tenant_id = $1 AND key = $2`, tenantID, key)
	return err
}

func (c *conn) PruneIdempotencyRecords(ctx context.Context, before time.Time) (int, error) {
	n, err := c.exec(ctx, "prune idempotency records", `DELETE FROM idempotency WHERE created_at < $1`, storecodec.Nanos(before))
	return int(n), err
}

// UpsertTemplate inserts or replaces t by ID, filling ID and CreatedAt when empty.
func (c *conn) UpsertTemplate(ctx context.Context, t *store.Template) error {
	if err := storecodec.PrepareTemplate(t); err != nil {
		return err
	}
	_, err := c.exec(ctx, "upsert template", `INSERT INTO templates (`+storecodec.TemplateColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name, digest = excluded.digest, state = excluded.state,
		size_bytes = excluded.size_bytes, defaults = excluded.defaults, created_at = excluded.created_at,
		tenant_id = excluded.tenant_id`,
		t.ID, t.Name, t.Digest, string(t.State), t.SizeBytes, storecodec.RawText(t.Defaults), storecodec.Nanos(t.CreatedAt), t.TenantID)
	return err
}

func (c *conn) GetTemplate(ctx context.Context, id string) (*store.Template, error) {
	c = c.bind(ctx)
	t, err := storecodec.ScanTemplate(c.q.QueryRow(ctx, `SELECT `+storecodec.TemplateColumns+` FROM templates WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, storecodec.NotFound("template", id)
	}
	if err != nil {
		return nil, dbErr("get template", err)
	}
	return t, nil
}

func (c *conn) GetTemplateByName(ctx context.Context, name, digest string) (*store.Template, error) {
	c = c.bind(ctx)
	var row pgx.Row
	if digest != "" {
		row = c.q.QueryRow(ctx, `SELECT `+storecodec.TemplateColumns+` FROM templates WHERE name = $1 AND digest = $2`, name, digest)
	} else {
		row = c.q.QueryRow(ctx, `SELECT `+storecodec.TemplateColumns+` FROM templates WHERE name = $1 AND state = $2
			ORDER BY created_at DESC, id DESC LIMIT 1`, name, string(store.TemplateReady))
	}
	t, err := storecodec.ScanTemplate(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, storecodec.NotFound("template", name)
	}
	if err != nil {
		return nil, dbErr("get template", err)
	}
	return t, nil
}

func (c *conn) ListTemplates(ctx context.Context) ([]*store.Template, error) {
	return collect(ctx, c.bind(ctx), "list templates", storecodec.ScanTemplate, `SELECT `+storecodec.TemplateColumns+` FROM templates ORDER BY name, created_at, id`)
}

func (c *conn) DeleteTemplate(ctx context.Context, id string) error {
	n, err := c.exec(ctx, "delete template", `DELETE FROM templates WHERE id = $1`, id)
	if err != nil {
		return err
	}
	if n == 0 {
		return storecodec.NotFound("template", id)
	}
	return nil
}
