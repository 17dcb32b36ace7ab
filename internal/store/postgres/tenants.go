package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// CreateTenant inserts t, filling ID and CreatedAt when empty.
func (c *conn) CreateTenant(ctx context.Context, t *store.Tenant) error {
	if err := storecodec.PrepareTenant(t); err != nil {
		return err
	}
	_, err := c.exec(ctx, "create tenant", `INSERT INTO tenants (`+storecodec.TenantColumns+`) VALUES ($1, $2, $3, $4, $5, $6)`,
		t.ID, t.Name, t.Quota.MaxSandboxes, t.Quota.MaxVCPUs, t.Quota.MaxMemoryMiB, storecodec.Nanos(t.CreatedAt))
	return err
}

func (c *conn) GetTenant(ctx context.Context, id string) (*store.Tenant, error) {
	return c.getTenant(ctx, id, "")
}

// getTenant reads a tenant; lock (e.g. " FOR NO KEY UPDATE") is appended to the query.
func (c *conn) getTenant(ctx context.Context, id, lock string) (*store.Tenant, error) {
	c = c.bind(ctx)
	t, err := storecodec.ScanTenant(c.q.QueryRow(ctx, `SELECT `+storecodec.TenantColumns+` FROM tenants WHERE id = $1`+lock, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, storecodec.NotFound("tenant", id)
	}
	if err != nil {
		return nil, dbErr("get tenant", err)
	}
	return t, nil
}

func (c *conn) GetTenantByName(ctx context.Context, name string) (*store.Tenant, error) {
	c = c.bind(ctx)
	t, err := storecodec.ScanTenant(c.q.QueryRow(ctx, `SELECT `+storecodec.TenantColumns+` FROM tenants WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, storecodec.NotFound("tenant", name)
	}
	if err != nil {
		return nil, dbErr("get tenant", err)
	}
	return t, nil
}

func (c *conn) ListTenants(ctx context.Context) ([]*store.Tenant, error) {
	return collect(ctx, c.bind(ctx), "list tenants", storecodec.ScanTenant, `SELECT `+storecodec.TenantColumns+` FROM tenants ORDER BY created_at, id`)
}

func (c *conn) SetTenantQuota(ctx context.Context, id string, q store.Quota) error {
	n, err := c.exec(ctx, "set quota", `UPDATE tenants SET max_sandboxes = $1, max_vcpus = $2, max_memory_mib = $3 WHERE id = $4`,
		q.MaxSandboxes, q.MaxVCPUs, q.MaxMemoryMiB, id)
	if err != nil {
		return err
	}
	if n == 0 {
		return storecodec.NotFound("tenant", id)
	}
	return nil
}

// CreateAPIKey inserts k, filling ID and CreatedAt when empty.
func (c *conn) CreateAPIKey(ctx context.Context, k *store.APIKey) error {
	if err := storecodec.PrepareAPIKey(k); err != nil {
		return err
	}
	_, err := c.exec(ctx, "create api key", `INSERT INTO api_keys (`+storecodec.APIKeyColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		k.ID, k.TenantID, k.Prefix, k.Hash, k.Admin, storecodec.Nanos(k.CreatedAt), storecodec.NullNanos(k.RevokedAt))
	return err
}

func (c *conn) GetAPIKeyByHash(ctx context.Context, hash string) (*store.APIKey, error) {
	c = c.bind(ctx)
	k, err := storecodec.ScanAPIKey(c.q.QueryRow(ctx, `SELECT `+storecodec.APIKeyColumns+` FROM api_keys WHERE hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "API key not found")
	}
	if err != nil {
		return nil, dbErr("get api key", err)
	}
	return k, nil
}

// RevokeAPIKey marks a key revoked; revoking twice keeps the first time.
func (c *conn) RevokeAPIKey(ctx context.Context, id string) error {
	n, err := c.exec(ctx, "revoke api key", `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2`, storecodec.Nanos(storecodec.Now()), id)
	if err != nil {
		return err
	}
	if n == 0 {
		return storecodec.NotFound("API key", id)
	}
	return nil
}

func (c *conn) ListAPIKeys(ctx context.Context, tenantID string) ([]*store.APIKey, error) {
	return collect(ctx, c.bind(ctx), "list api keys", storecodec.ScanAPIKey,
		`SELECT `+storecodec.APIKeyColumns+` FROM api_keys WHERE ($1 = '' OR tenant_id = $1) ORDER BY created_at, id`, tenantID)
}
