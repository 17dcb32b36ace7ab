package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// CreateSandbox inserts sb after checking the tenant's quota, in one
// transaction. It fills ID, CreatedAt, UpdatedAt and LastActivityAt when empty.
func (c *conn) CreateSandbox(ctx context.Context, sb *store.Sandbox) error {
	c = c.bind(ctx)
	if err := storecodec.PrepareSandbox(sb); err != nil {
		return err
	}
	return c.atomic(ctx, func(tc *conn) error {
		if sb.State.Live() {
			if err := tc.CheckQuota(ctx, sb.TenantID, store.Usage{Sandboxes: 1, VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB}); err != nil {
				return err
			}
		}
		_, err := tc.wr.ExecContext(ctx, `INSERT INTO sandboxes (`+storecodec.SandboxColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, storecodec.SandboxArgs(sb)...)
		if err != nil {
			return dbErr("create sandbox", err)
		}
		return nil
	})
}

// CheckQuota fails with ErrResourceExhausted when extra does not fit the
// tenant's quota next to what it holds.
func (c *conn) CheckQuota(ctx context.Context, tenantID string, extra store.Usage) error {
	c = c.bind(ctx)
	t, err := c.GetTenant(ctx, tenantID)
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
	err := c.rd.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(vcpus), 0), COALESCE(SUM(memory_mib), 0)
		FROM sandboxes WHERE tenant_id = ? AND state NOT IN (?, ?)`,
		tenantID, string(store.SandboxDeleted), string(store.SandboxFailed)).Scan(&u.Sandboxes, &u.VCPUs, &u.MemoryMiB)
	if err != nil {
		return store.Usage{}, dbErr("sandbox usage", err)
	}
	return u, nil
}

func (c *conn) GetSandbox(ctx context.Context, tenantID, id string) (*store.Sandbox, error) {
	c = c.bind(ctx)
	sb, err := storecodec.ScanSandbox(c.rd.QueryRowContext(ctx, `SELECT `+storecodec.SandboxColumns+` FROM sandboxes
		WHERE id = ? AND (? = '' OR tenant_id = ?)`, id, tenantID, tenantID))
	if errors.Is(err, sql.ErrNoRows) {
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
		q.filter("tenant_id = ?", f.TenantID)
	}
	if len(f.States) > 0 {
		q.filter("state IN ("+placeholders(len(f.States))+")", stateArgs(f.States)...)
	}
	if len(f.ExcludeStates) > 0 {
		q.filter("state NOT IN ("+placeholders(len(f.ExcludeStates))+")", stateArgs(f.ExcludeStates)...)
	}
	if f.Worker != "" {
		q.filter("worker = ?", f.Worker)
	}
	keys := make([]string, 0, len(f.Metadata))
	for k := range f.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.filter("EXISTS (SELECT 1 FROM json_each(sandboxes.metadata) WHERE json_each.key = ? AND json_each.value = ? AND json_each.type = 'text')",
			k, f.Metadata[k])
	}
	return listPage(ctx, c.bind(ctx), q, storecodec.ScanSandbox, func(sb *store.Sandbox) (time.Time, string) { return sb.CreatedAt, sb.ID })
}

func stateArgs(states []store.SandboxState) []any {
	args := make([]any, len(states))
	for i, s := range states {
		args[i] = string(s)
	}
	return args
}

// TransitionSandbox compares the state, applies mutate and writes, in one
// transaction.
func (c *conn) TransitionSandbox(ctx context.Context, tenantID, id string, from []store.SandboxState, to store.SandboxState,
	mutate func(*store.Sandbox) error) (*store.Sandbox, error) {
	c = c.bind(ctx)
	var out *store.Sandbox
	err := c.atomic(ctx, func(tc *conn) error {
		sb, err := tc.GetSandbox(ctx, tenantID, id)
		if err != nil {
			return err
		}
		if err := storecodec.ChangeSandbox(sb, from, to, mutate); err != nil {
			return err
		}
		args := storecodec.SandboxArgs(sb)[2:] // everything after id, tenant_id
		args = append(args, sb.ID)
		_, err = tc.wr.ExecContext(ctx, `UPDATE sandboxes SET template = ?, template_digest = ?, state = ?, vcpus = ?,
			memory_mib = ?, disk_mib = ?, env = ?, metadata = ?, network = ?, worker = ?, timeout_seconds = ?,
			idle_timeout_seconds = ?, created_at = ?, updated_at = ?, expires_at = ?, last_activity_at = ?, last_error = ?
			WHERE id = ?`, args...)
		if err != nil {
			return dbErr(fmt.Sprintf("update sandbox %s", id), err)
		}
		out = sb
		return nil
	})
	return out, err
}
