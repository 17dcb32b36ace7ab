package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// CreateCommand inserts cmd, filling ID, ProcessID (= ID), State (created)
// and CreatedAt when empty. The sandbox must exist (ErrNotFound).
func (c *conn) CreateCommand(ctx context.Context, cmd *store.Command) error {
	c = c.bind(ctx)
	if err := storecodec.PrepareCommand(cmd); err != nil {
		return err
	}
	return c.atomic(ctx, func(tc *conn) error {
		// Tenant scoping: a command can only go into the tenant's own sandbox.
		if _, err := tc.GetSandbox(ctx, cmd.TenantID, cmd.SandboxID); err != nil {
			return err
		}
		_, err := tc.wr.ExecContext(ctx, `INSERT INTO commands (`+storecodec.CommandColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			cmd.ID, cmd.TenantID, cmd.SandboxID, cmd.ProcessID, string(cmd.Spec), string(cmd.State), cmd.PID, storecodec.RawText(cmd.Exit),
			storecodec.Nanos(cmd.CreatedAt), storecodec.NullNanos(cmd.StartedAt))
		if err != nil {
			return dbErr("create command", err)
		}
		return nil
	})
}

func (c *conn) GetCommand(ctx context.Context, tenantID, sandboxID, id string) (*store.Command, error) {
	c = c.bind(ctx)
	cmd, err := storecodec.ScanCommand(c.rd.QueryRowContext(ctx, `SELECT `+storecodec.CommandColumns+` FROM commands
		WHERE id = ? AND (? = '' OR tenant_id = ?) AND (? = '' OR sandbox_id = ?)`, id, tenantID, tenantID, sandboxID, sandboxID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, storecodec.NotFound("command", id)
	}
	if err != nil {
		return nil, dbErr("get command", err)
	}
	return cmd, nil
}

func (c *conn) ListCommands(ctx context.Context, f store.CommandFilter) (store.Page[*store.Command], error) {
	q := pageQuery{what: "list commands", cols: storecodec.CommandColumns, table: "commands", PageRequest: f.PageRequest}
	q.filter("sandbox_id = ? AND (? = '' OR tenant_id = ?)", f.SandboxID, f.TenantID, f.TenantID)
	return listPage(ctx, c.bind(ctx), q, storecodec.ScanCommand, func(cmd *store.Command) (time.Time, string) { return cmd.CreatedAt, cmd.ID })
}

func (c *conn) UpdateCommand(ctx context.Context, id string, from []store.CommandState, mutate func(*store.Command) error) (*store.Command, error) {
	c = c.bind(ctx)
	var out *store.Command
	err := c.atomic(ctx, func(tc *conn) error {
		cmd, err := tc.GetCommand(ctx, store.AnyTenant, "", id)
		if err != nil {
			return err
		}
		if err := storecodec.ChangeCommand(cmd, from, mutate); err != nil {
			return err
		}
		_, err = tc.wr.ExecContext(ctx, `UPDATE commands SET spec = ?, state = ?, pid = ?, exit = ?, started_at = ? WHERE id = ?`,
			string(cmd.Spec), string(cmd.State), cmd.PID, storecodec.RawText(cmd.Exit), storecodec.NullNanos(cmd.StartedAt), cmd.ID)
		if err != nil {
			return dbErr("update command", err)
		}
		out = cmd
		return nil
	})
	return out, err
}
