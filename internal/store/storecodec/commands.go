package storecodec

import "github.com/space-sandbox/space/internal/store"

// CommandColumns are the commands columns in the order ScanCommand reads.
const CommandColumns = `id, tenant_id, sandbox_id, process_id, spec, state, pid, exit, created_at, started_at`

// ScanCommand reads one commands row of CommandColumns.
func ScanCommand(row Row) (*store.Command, error) {
	var cmd store.Command
	var spec string
	var exit *string
	var created int64
	var started *int64
	if err := row.Scan(&cmd.ID, &cmd.TenantID, &cmd.SandboxID, &cmd.ProcessID, &spec, &cmd.State, &cmd.PID, &exit, &created, &started); err != nil {
		return nil, err
	}
	cmd.Spec = RawFrom(&spec)
	cmd.Exit = RawFrom(exit)
	cmd.CreatedAt, cmd.StartedAt = FromNanos(created), TimePtr(started)
	return &cmd, nil
}

// NormCommand makes cmd what a read of it returns.
func NormCommand(cmd *store.Command) {
	cmd.CreatedAt, cmd.StartedAt = Norm(cmd.CreatedAt), NormPtr(cmd.StartedAt)
	if len(cmd.Spec) == 0 {
		cmd.Spec = nil
	}
	if len(cmd.Exit) == 0 {
		cmd.Exit = nil
	}
}
