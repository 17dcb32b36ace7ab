package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// PutSecret inserts or replaces a sealed secret in one statement; the
// upsert reports whether it inserted (xmax is 0 only on a fresh row
// version) and the CreatedAt it kept.
func (c *conn) PutSecret(ctx context.Context, s *store.Secret) (created bool, err error) {
	if s.TenantID == "" || s.Name == "" || len(s.Sealed) == 0 {
		return false, errdefs.New(errdefs.ErrInvalidArgument, "secret tenant, name and value are required")
	}
	t := storecodec.Now()
	var createdAt int64
	err = c.step(ctx, func(tc *conn) error {
		err := tc.q.QueryRow(ctx, `INSERT INTO secrets (tenant_id, name, sealed, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)
			ON CONFLICT (tenant_id, name) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at
			RETURNING created_at, (xmax = 0)`, s.TenantID, s.Name, s.Sealed, storecodec.Nanos(t)).Scan(&createdAt, &created)
		if err != nil {
			return dbErr("put secret", err)
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	s.CreatedAt, s.UpdatedAt = storecodec.FromNanos(createdAt), t
	return created, nil
}

func (c *conn) GetSecret(ctx context.Context, tenantID, name string) (*store.Secret, error) {
	c = c.bind(ctx)
	s := &store.Secret{TenantID: tenantID, Name: name}
	var created, updated int64
	err := c.q.QueryRow(ctx, `SELECT sealed, created_at, updated_at FROM secrets WHERE tenant_id = $1 AND name = $2`,
		tenantID, name).Scan(&s.Sealed, &created, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, storecodec.NotFound("secret", name)
	}
	if err != nil {
		return nil, dbErr("get secret", err)
	}
	s.CreatedAt, s.UpdatedAt = storecodec.FromNanos(created), storecodec.FromNanos(updated)
	return s, nil
}

func (c *conn) ListSecrets(ctx context.Context, tenantID string) ([]*store.Secret, error) {
	out, err := collect(ctx, c.bind(ctx), "list secrets", func(row storecodec.Row) (*store.Secret, error) {
		s := &store.Secret{TenantID: tenantID}
		var created, updated int64
		if err := row.Scan(&s.Name, &created, &updated); err != nil {
			return nil, err
		}
		s.CreatedAt, s.UpdatedAt = storecodec.FromNanos(created), storecodec.FromNanos(updated)
		return s, nil
	}, `SELECT name, created_at, updated_at FROM secrets WHERE tenant_id = $1 ORDER BY name`, tenantID)
	if out == nil && err == nil {
		out = []*store.Secret{}
	}
	return out, err
}

func (c *conn) DeleteSecret(ctx context.Context, tenantID, name string) error {
	n, err := c.exec(ctx, "delete secret", `DELETE FROM secrets WHERE tenant_id = $1 AND name = $2`, tenantID, name)
	if err != nil {
		return err
	}
	if n == 0 {
		return storecodec.NotFound("secret", name)
	}
	return nil
}
