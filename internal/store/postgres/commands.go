package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/storecodec"
)

// CreateCommand inserts cmd, filling ID, ProcessID (= ID), State (created)
// and CreatedAt when empty. The sandbox must exist (ErrNotFound).
func (c *conn) CreateCommand(ctx context.Context, cmd *store.Command) error {
	if err := storecodec.PrepareCommand(cmd); err != nil {
		return err
	}
	return c.atomic(ctx, func(tc *conn) error {
		// Tenant scoping: a command can only go into the tenant's own sandbox.
		if _, err := tc.GetSandbox(ctx, cmd.TenantID, cmd.SandboxID); err != nil {
			return err
		}
		_, err := tc.q.Exec(ctx, `INSERT INTO commands (`+storecodec.CommandColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			cmd.ID, cmd.TenantID, cmd.SandboxID, cmd.ProcessID, string(cmd.Spec), string(cmd.State), cmd.PID, storecodec.RawText(cmd.Exit),
			storecodec.Nanos(cmd.CreatedAt), storecodec.NullNanos(cmd.StartedAt))
		if err != nil {
			return dbErr("create command", err)
		}
		return nil
	})
}

func (c *conn) GetCommand(ctx context.Context, tenantID, sandboxID, id string) (*store.Command, error) {
	return c.getCommand(ctx, tenantID, sandboxID, id, "")
}

func (c *conn) getCommand(ctx context.Context, tenantID, sandboxID, id, lock string) (*store.Command, error) {
	c = c.bind(ctx)
	cmd, err := storecodec.ScanCommand(c.q.QueryRow(ctx, `SELECT `+storecodec.CommandColumns+` FROM commands
		WHERE id = $1 AND ($2 = '' OR tenant_id = $2) AND ($3 = '' OR sandbox_id = $3)`+lock, id, tenantID, sandboxID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, storecodec.NotFound("command", id)
	}
	if err != nil {
		return nil, dbErr("get command", err)
	}
	return cmd, nil
}

func (c *conn) ListCommands(ctx context.Context, f store.CommandFilter) (store.Page[*store.Command], error) {
	q := pageQuery{what: "list commands", cols: storecodec.CommandColumns, table: "commands", PageRequest: f.PageRequest}
	q.filter("sandbox_id = " + q.arg(f.SandboxID))
	t := q.arg(f.TenantID)
	q.filter("(" + t + " = '' OR tenant_id = " + t + ")")
	return listPage(ctx, c.bind(ctx), q, storecodec.ScanCommand, func(cmd *store.Command) (time.Time, string) { return cmd.CreatedAt, cmd.ID })
}

// UpdateCommand locks the row, compares the state, applies mutate and
// writes, in one transaction.
func (c *conn) UpdateCommand(ctx context.Context, id string, from []store.CommandState, mutate func(*store.Command) error) (*store.Command, error) {
	var out *store.Command
	err := c.atomic(ctx, func(tc *conn) error {
		cmd, err := tc.getCommand(ctx, store.AnyTenant, "", id, " FOR NO KEY UPDATE")
		if err != nil {
			return err
		}
		if err := storecodec.ChangeCommand(cmd, from, mutate); err != nil {
			return err
		}
		_, err = tc.q.Exec(ctx, `UPDATE commands SET spec = $1, state = $2, pid = $3, exit = $4, started_at = $5 WHERE id = $6`,
			string(cmd.Spec), string(cmd.State), cmd.PID, storecodec.RawText(cmd.Exit), storecodec.NullNanos(cmd.StartedAt), cmd.ID)
		if err != nil {
			return dbErr("update command", err)
		}
		out = cmd
		return nil
	})
	return out, err
}
