package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// PutSecret inserts or replaces a sealed secret.
func (c *conn) PutSecret(ctx context.Context, s *store.Secret) (created bool, err error) {
	if s.TenantID == "" || s.Name == "" || len(s.Sealed) == 0 {
		return false, errdefs.New(errdefs.ErrInvalidArgument, "secret tenant, name and value are required")
	}
	err = c.atomic(ctx, func(tc *conn) error {
		t := storecodec.Now()
		var createdAt int64
		err := tc.rd.QueryRowContext(ctx, `SELECT created_at FROM secrets WHERE tenant_id = ? AND name = ?`,
			s.TenantID, s.Name).Scan(&createdAt)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			created = true
			if _, err := tc.wr.ExecContext(ctx, `INSERT INTO secrets (tenant_id, name, sealed, created_at, updated_at)
				VALUES (?, ?, ?, ?, ?)`, s.TenantID, s.Name, s.Sealed, storecodec.Nanos(t), storecodec.Nanos(t)); err != nil {
				return dbErr("put secret", err)
			}
			s.CreatedAt, s.UpdatedAt = t, t
		case err != nil:
			return dbErr("put secret", err)
		default:
			if _, err := tc.wr.ExecContext(ctx, `UPDATE secrets SET sealed = ?, updated_at = ? WHERE tenant_id = ? AND name = ?`,
				s.Sealed, storecodec.Nanos(t), s.TenantID, s.Name); err != nil {
				return dbErr("put secret", err)
			}
			s.CreatedAt, s.UpdatedAt = storecodec.FromNanos(createdAt), t
		}
		return nil
	})
	return created, err
}

func (c *conn) GetSecret(ctx context.Context, tenantID, name string) (*store.Secret, error) {
	c = c.bind(ctx)
	s := &store.Secret{TenantID: tenantID, Name: name}
	var created, updated int64
	err := c.rd.QueryRowContext(ctx, `SELECT sealed, created_at, updated_at FROM secrets WHERE tenant_id = ? AND name = ?`,
		tenantID, name).Scan(&s.Sealed, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, storecodec.NotFound("secret", name)
	}
	if err != nil {
		return nil, dbErr("get secret", err)
	}
	s.CreatedAt, s.UpdatedAt = storecodec.FromNanos(created), storecodec.FromNanos(updated)
	return s, nil
}

func (c *conn) ListSecrets(ctx context.Context, tenantID string) ([]*store.Secret, error) {
	out, err := collect(ctx, c.bind(ctx).rd, "list secrets", func(row storecodec.Row) (*store.Secret, error) {
		s := &store.Secret{TenantID: tenantID}
		var created, updated int64
		if err := row.Scan(&s.Name, &created, &updated); err != nil {
			return nil, err
		}
		s.CreatedAt, s.UpdatedAt = storecodec.FromNanos(created), storecodec.FromNanos(updated)
		return s, nil
	}, `SELECT name, created_at, updated_at FROM secrets WHERE tenant_id = ? ORDER BY name`, tenantID)
	if out == nil && err == nil {
		out = []*store.Secret{}
	}
	return out, err
}

func (c *conn) DeleteSecret(ctx context.Context, tenantID, name string) error {
	c = c.bind(ctx)
	res, err := c.wr.ExecContext(ctx, `DELETE FROM secrets WHERE tenant_id = ? AND name = ?`, tenantID, name)
	if err != nil {
		return dbErr("delete secret", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return storecodec.NotFound("secret", name)
	}
	return nil
}
