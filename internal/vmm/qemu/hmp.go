package qemu

import "context"

// HumanMonitor runs one human-monitor (HMP) command, such as "info jit",
// over the VM's QMP link and returns its text output. It is for
// diagnostics and benches on the host (bench/jit); nothing a tenant sends
// reaches it.
func (v *VM) HumanMonitor(ctx context.Context, command string) (string, error) {
	var out string
	err := v.qmp.Execute(ctx, "human-monitor-command", map[string]any{"command-line": command}, &out)
	return out, err
}
