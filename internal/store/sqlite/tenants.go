package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// CreateTenant inserts t, filling ID and CreatedAt when empty.
func (c *conn) CreateTenant(ctx context.Context, t *store.Tenant) error {
	c = c.bind(ctx)
	if err := storecodec.PrepareTenant(t); err != nil {
		return err
	}
	_, err := c.wr.ExecContext(ctx, `INSERT INTO tenants (`+storecodec.TenantColumns+`) VALUES (?, ?, ?, ?, ?, ?)`,
		t.ID, t.Name, t.Quota.MaxSandboxes, t.Quota.MaxVCPUs, t.Quota.MaxMemoryMiB, storecodec.Nanos(t.CreatedAt))
	if err != nil {
		return dbErr("create tenant", err)
	}
	return nil
}

func (c *conn) GetTenant(ctx context.Context, id string) (*store.Tenant, error) {
	c = c.bind(ctx)
	t, err := storecodec.ScanTenant(c.rd.QueryRowContext(ctx, `SELECT `+storecodec.TenantColumns+` FROM tenants WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, storecodec.NotFound("tenant", id)
	}
	if err != nil {
		return nil, dbErr("get tenant", err)
	}
	return t, nil
}

func (c *conn) GetTenantByName(ctx context.Context, name string) (*store.Tenant, error) {
	c = c.bind(ctx)
	t, err := storecodec.ScanTenant(c.rd.QueryRowContext(ctx, `SELECT `+storecodec.TenantColumns+` FROM tenants WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, storecodec.NotFound("tenant", name)
	}
	if err != nil {
		return nil, dbErr("get tenant", err)
	}
	return t, nil
}

func (c *conn) ListTenants(ctx context.Context) ([]*store.Tenant, error) {
	return collect(ctx, c.bind(ctx).rd, "list tenants", storecodec.ScanTenant, `SELECT `+storecodec.TenantColumns+` FROM tenants ORDER BY created_at, id`)
}

func (c *conn) SetTenantQuota(ctx context.Context, id string, q store.Quota) error {
	c = c.bind(ctx)
	res, err := c.wr.ExecContext(ctx, `UPDATE tenants SET max_sandboxes = ?, max_vcpus = ?, max_memory_mib = ? WHERE id = ?`,
		q.MaxSandboxes, q.MaxVCPUs, q.MaxMemoryMiB, id)
	if err != nil {
		return dbErr("set quota", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return storecodec.NotFound("tenant", id)
	}
	return nil
}

// CreateAPIKey inserts k, filling ID and CreatedAt when empty.
func (c *conn) CreateAPIKey(ctx context.Context, k *store.APIKey) error {
	c = c.bind(ctx)
	if err := storecodec.PrepareAPIKey(k); err != nil {
		return err
	}
	_, err := c.wr.ExecContext(ctx, `INSERT INTO api_keys (`+storecodec.APIKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.TenantID, k.Prefix, k.Hash, k.Admin, storecodec.Nanos(k.CreatedAt), storecodec.NullNanos(k.RevokedAt))
	if err != nil {
		return dbErr("create api key", err)
	}
	return nil
}

func (c *conn) GetAPIKeyByHash(ctx context.Context, hash string) (*store.APIKey, error) {
	c = c.bind(ctx)
	k, err := storecodec.ScanAPIKey(c.rd.QueryRowContext(ctx, `SELECT `+storecodec.APIKeyColumns+` FROM api_keys WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "API key not found")
	}
	if err != nil {
		return nil, dbErr("get api key", err)
	}
	return k, nil
}

// RevokeAPIKey marks a key revoked; revoking twice keeps the first time.
func (c *conn) RevokeAPIKey(ctx context.Context, id string) error {
	c = c.bind(ctx)
	res, err := c.wr.ExecContext(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, storecodec.Nanos(storecodec.Now()), id)
	if err != nil {
		return dbErr("revoke api key", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return storecodec.NotFound("API key", id)
	}
	return nil
}

func (c *conn) ListAPIKeys(ctx context.Context, tenantID string) ([]*store.APIKey, error) {
	return collect(ctx, c.bind(ctx).rd, "list api keys", storecodec.ScanAPIKey, `SELECT `+storecodec.APIKeyColumns+` FROM api_keys WHERE (? = '' OR tenant_id = ?) ORDER BY created_at, id`, tenantID, tenantID)
}
