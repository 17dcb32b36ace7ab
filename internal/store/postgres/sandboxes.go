package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// CreateSandbox inserts sb after checking the tenant's quota, in one
// transaction. It fills ID, CreatedAt, UpdatedAt and LastActivityAt when empty.
func (c *conn) CreateSandbox(ctx context.Context, sb *store.Sandbox) error {
	if err := storecodec.PrepareSandbox(sb); err != nil {
		return err
	}
	return c.atomic(ctx, func(tc *conn) error {
		if sb.State.Live() {
			if err := tc.CheckQuota(ctx, sb.TenantID, store.Usage{Sandboxes: 1, VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB}); err != nil {
				return err
			}
		}
		_, err := tc.q.Exec(ctx, `INSERT INTO sandboxes (`+storecodec.SandboxColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11, $12, $13, $14, $15, $16, $17, $18, $19)`, storecodec.SandboxArgs(sb)...)
		if err != nil {
			return dbErr("create sandbox", err)
		}
		return nil
	})
}

// CheckQuota fails with ErrResourceExhausted when extra does not fit the
// tenant's quota next to what it holds. Inside a transaction it locks the
// tenant's row, so quota checks of one tenant queue instead of both passing.
func (c *conn) CheckQuota(ctx context.Context, tenantID string, extra store.Usage) error {
	c = c.bind(ctx)
	lock := ""
	if c.tx != nil {
		lock = " FOR NO KEY UPDATE"
	}
	t, err := c.getTenant(ctx, tenantID, lock)
	if err != nil {
		return err
	}
	if t.Quota == (store.Quota{}) {
		return nil
	}
	u, err := c.SandboxUsage(ctx, tenantID)
	if err != nil {
		return err
	}
	return storecodec.CheckQuota(t.Quota, u, extra)
}

// SandboxUsage sums the tenant's live sandboxes.
func (c *conn) SandboxUsage(ctx context.Context, tenantID string) (store.Usage, error) {
	c = c.bind(ctx)
	var u store.Usage
	err := c.q.QueryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(vcpus), 0), COALESCE(SUM(memory_mib), 0)
		FROM sandboxes WHERE tenant_id = $1 AND state NOT IN ($2, $3)`,
		tenantID, string(store.SandboxDeleted), string(store.SandboxFailed)).Scan(&u.Sandboxes, &u.VCPUs, &u.MemoryMiB)
	if err != nil {
		return store.Usage{}, dbErr("sandbox usage", err)
	}
	return u, nil
}

func (c *conn) GetSandbox(ctx context.Context, tenantID, id string) (*store.Sandbox, error) {
	return c.getSandbox(ctx, tenantID, id, "")
}

func (c *conn) getSandbox(ctx context.Context, tenantID, id, lock string) (*store.Sandbox, error) {
	c = c.bind(ctx)
	sb, err := storecodec.ScanSandbox(c.q.QueryRow(ctx, `SELECT `+storecodec.SandboxColumns+` FROM sandboxes
		WHERE id = $1 AND ($2 = '' OR tenant_id = $2)`+lock, id, tenantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, storecodec.NotFound("sandbox", id)
	}
	if err != nil {
		return nil, dbErr("get sandbox", err)
	}
	return sb, nil
}

func (c *conn) ListSandboxes(ctx context.Context, f store.SandboxFilter) (store.Page[*store.Sandbox], error) {
	q := pageQuery{what: "list sandboxes", cols: storecodec.SandboxColumns, table: "sandboxes", PageRequest: f.PageRequest}
	if f.TenantID != "" {
		q.filter("tenant_id = " + q.arg(f.TenantID))
	}
	if len(f.States) > 0 {
		q.filter("state = ANY(" + q.arg(stateArgs(f.States)) + ")")
	}
	if len(f.ExcludeStates) > 0 {
		q.filter("state <> ALL(" + q.arg(stateArgs(f.ExcludeStates)) + ")")
	}
	if f.Worker != "" {
		q.filter("worker = " + q.arg(f.Worker))
	}
	if len(f.Metadata) > 0 {
		// Containment of an object of strings: each key present with
		// exactly that string value.
		b, err := json.Marshal(f.Metadata)
		if err != nil {
			return store.Page[*store.Sandbox]{}, errdefs.New(errdefs.ErrInvalidArgument, "invalid metadata filter")
		}
		q.filter("metadata @> " + q.arg(string(b)) + "::jsonb")
	}
	return listPage(ctx, c.bind(ctx), q, storecodec.ScanSandbox, func(sb *store.Sandbox) (time.Time, string) { return sb.CreatedAt, sb.ID })
}

func stateArgs(states []store.SandboxState) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

// TransitionSandbox locks the row, compares the state, applies mutate and
// writes, in one transaction.
func (c *conn) TransitionSandbox(ctx context.Context, tenantID, id string, from []store.SandboxState, to store.SandboxState,
	mutate func(*store.Sandbox) error) (*store.Sandbox, error) {
	var out *store.Sandbox
	err := c.atomic(ctx, func(tc *conn) error {
		sb, err := tc.getSandbox(ctx, tenantID, id, " FOR NO KEY UPDATE")
		if err != nil {
			return err
		}
		if err := storecodec.ChangeSandbox(sb, from, to, mutate); err != nil {
			return err
		}
		a := storecodec.SandboxArgs(sb)[2:] // everything after id, tenant_id
		a = append(a, sb.ID)
		_, err = tc.q.Exec(ctx, `UPDATE sandboxes SET template = $1, template_digest = $2, state = $3, vcpus = $4,
			memory_mib = $5, disk_mib = $6, env = $7, metadata = $8::jsonb, network = $9, worker = $10, timeout_seconds = $11,
			idle_timeout_seconds = $12, created_at = $13, updated_at = $14, expires_at = $15, last_activity_at = $16,
			last_error = $17 WHERE id = $18`, a...)
		if err != nil {
			return dbErr(fmt.Sprintf("update sandbox %s", id), err)
		}
		out = sb
		return nil
	})
	return out, err
}
