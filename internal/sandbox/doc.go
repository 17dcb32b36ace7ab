// Package sandbox is SPACE's control-plane domain: the sandbox state
// machine as one table (states.go: each verb's from, during and to
// states), the operation handlers that move sandboxes along it on a worker
// (create, branch, delete, pause, suspend, wake, restore, checkpoint),
// reconcile after a restart, expiry and idle suspend (Run), and command
// sessions: start on first attach, exit recording, server-side deadlines
// and the commands a branch or restore inherits from its checkpoint; and
// the ports of guests (ports.go): who may reach which port (URL tokens,
// the traffic token), dialling only running sandboxes, the audit log.
//
// It works on store values and errdefs errors and returns domain values.
// It knows nothing of HTTP or of the wire types (internal/api converts),
// owns no persistence (internal/store), no operation scheduling
// (internal/operation) and no VM mechanics (internal/worker).
package sandbox
