// Package worker is the contract between the control plane and the part of
// SPACE that runs sandboxes on one host: it boots a sandbox's microVM from a
// template image, hands out a client for the guest agent, and tears the VM
// down. The single-node server runs a local implementation in-process; a
// cluster's remote worker client satisfies the same interface.
//
// A worker knows nothing of tenants, quotas, operations or the API; the
// control plane owns those.
package worker

import (
	"context"
	"encoding/json"
	"time"
)

// SandboxSpec is what a worker needs to start one sandbox.
type SandboxSpec struct {
	ID string // "sbx_…"
	// Template names the template image to clone (for now a name such as
	// "base"; digests come with the templates issue).
	Template  string
	VCPUs     int
	MemoryMiB int
	DiskMiB   int               // root disk size; 0 keeps the template's size
	Env       map[string]string // default environment of every command
	Hostname  string
	// FromCheckpoint, when set, makes the sandbox a branch of that checkpoint
	// (an id given to Lifecycle.Checkpoint): its disk, memory and processes
	// start as they were at the checkpoint. Template, VCPUs, MemoryMiB and
	// DiskMiB are then taken from the checkpoint and the fields here are
	// ignored; ID, Env and Hostname are the new sandbox's own.
	FromCheckpoint string `json:",omitempty"`
	// FromSnapshot, when set, makes the sandbox the wake of a suspend
	// snapshot kept in object storage under that name (SuspendSnapshot of
	// the sandbox's id), made by whichever worker suspended it: the worker
	// downloads and verifies it, then wakes it as it wakes its own
	// suspended sandboxes. Everything but ID is then taken from the spec
	// stored with the snapshot. A worker without an object store refuses it
	// (ErrFailedPrecondition); a missing snapshot is ErrNotFound, a damaged
	// one ErrDataLoss.
	FromSnapshot string `json:",omitempty"`
	// Network is the sandbox's egress policy: the API's network object
	// (docs/api.md, "The network policy"), as
	// egress.ParsePolicy reads it. Empty denies all egress.
	Network json.RawMessage `json:",omitempty"`
	// SecretScope is whose secrets the policy's ${secret:NAME} references
	// resolve against (the tenant id); the worker resolves them at request
	// time, never before.
	SecretScope string `json:",omitempty"`
}

// SuspendSnapshot is the object-storage name of sandbox id's suspend
// snapshot: "sandboxes/<id>". A worker with an object store uploads it on
// suspend; the cluster wakes the sandbox from it on any worker.
func SuspendSnapshot(id string) string { return "sandboxes/" + id }

// VMState is the state of a sandbox's VM as its worker reports it: one of
// the VM constants. It is the worker's word on the VM, not the sandbox's
// state in the store (the control plane maps one onto the other).
type VMState string

// VM states a worker reports.
const (
	VMRunning VMState = "running"
	VMPaused  VMState = "paused"
	VMStopped VMState = "stopped" // the VMM is gone (crashed or stopped)
	// VMSuspended: no VMM runs; memory, device state and disk are kept in a
	// checksummed snapshot on the worker's disk until WakeSandbox.
	VMSuspended VMState = "suspended"
)

// SandboxStatus is what a worker knows of one sandbox it hosts.
type SandboxStatus struct {
	ID        string
	State     VMState
	VMMPID    int
	BootedAt  time.Time
	DiskBytes int64 // bytes allocated to the sandbox's own disk
	// MemoryBytes is what the sandbox's guest RAM occupies on the worker's
	// disk (its memory file; 0 for a VM without one). Shared reflinked
	// extents count in full: an upper bound.
	MemoryBytes int64
	// SnapshotBytes is what its suspend snapshot occupies (VMSuspended only).
	SnapshotBytes int64
	// Restored is true when the VM was started from a snapshot (the
	// template's ready snapshot, a checkpoint or a suspend), false after a
	// cold boot.
	Restored bool
	// Lost says, for a VMStopped sandbox, what the worker knows of why its VM
	// is gone, in words a tenant may read ("" when it does not know).
	Lost string
	// Spec is what the sandbox was created with (for a branch: the
	// checkpoint's template and sizes, with the branch's ID, Env, Hostname).
	Spec SandboxSpec
}

// CheckpointStatus describes one checkpoint a worker keeps.
type CheckpointStatus struct {
	ID        string
	SandboxID string      // the sandbox it was taken of (which may be gone)
	Spec      SandboxSpec // that sandbox's spec at the checkpoint
	CreatedAt time.Time
	SizeBytes int64 // bytes its files occupy (shared extents counted in full)
	// Paused is how long the sandbox's vCPUs were stopped to take it.
	Paused time.Duration
}

// Exit is reported when a sandbox's VM stops without being asked to.
type Exit struct {
	SandboxID string
	Err       error // internal cause (console tail in details); never shown raw
	// Lost says why the VM is gone in words a tenant may read, when the
	// worker knows ("" otherwise), as SandboxStatus.Lost does.
	Lost string
	// Drain is set, with Err and Lost empty, when the sandbox is not lost
	// but being moved: Kubernetes evicts its Pod (a node drain) and its
	// worker suspends it to object storage before the Pod goes. The control
	// plane records that as a suspend and follows it through a Drainer.
	Drain bool `json:",omitempty"`
}

// Worker runs sandboxes on one host.
type Worker interface {
	Lifecycle
	// Ready reports whether the worker can start VMs now (kernel, templates,
	// storage and VMM present); the error says what is missing.
	Ready(ctx context.Context) error
	// CreateSandbox clones the template's disk, boots the VM, waits for the
	// agent and configures it. On error nothing is left behind.
	CreateSandbox(ctx context.Context, spec SandboxSpec) (SandboxStatus, error)
	// DeleteSandbox stops the VM and removes its files. Idempotent: deleting
	// an unknown sandbox succeeds.
	DeleteSandbox(ctx context.Context, id string) error
	// Sandbox reports one sandbox; errdefs.ErrNotFound when unknown.
	Sandbox(ctx context.Context, id string) (SandboxStatus, error)
	// Sandboxes lists what this worker hosts, for reconciliation at start-up.
	Sandboxes(ctx context.Context) ([]SandboxStatus, error)
	// Agent returns the sandbox's Guest (see Guest for what survives what).
	// errdefs.ErrNotFound for an unknown sandbox.
	Agent(ctx context.Context, id string) (Guest, error)
	// SetNetworkPolicy replaces a sandbox's egress policy at once: new
	// connections, requests and DNS queries see it, open connections it no
	// longer allows are closed, and it is kept across restarts of the
	// worker. ErrInvalidArgument for a bad policy, ErrNotFound for an
	// unknown sandbox.
	SetNetworkPolicy(ctx context.Context, id string, policy json.RawMessage) error
	// NetworkLog returns the sandbox's egress audit records (every allowed
	// and denied connection, request and query), oldest first.
	NetworkLog(ctx context.Context, id string) ([]NetworkRecord, error)
	// Exits delivers one Exit for each VM that stopped on its own.
	Exits() <-chan Exit
	// Close releases the worker's own resources; sandboxes keep running and
	// are adopted by the next worker process.
	Close() error
}

// Lifecycle is the part of a worker that pauses, suspends, wakes and
// checkpoints sandboxes. internal/worker/local implements it. Every method
// serialises with the other lifecycle calls on the same sandbox; a call in
// the wrong state fails with errdefs.ErrConflict naming the state
// (the API answers 409 with the current state). Unknown ids fail with
// errdefs.ErrNotFound.
type Lifecycle interface {
	// PauseSandbox stops the vCPUs of a running sandbox; memory stays
	// resident. State becomes VMPaused. Pausing a paused sandbox succeeds.
	PauseSandbox(ctx context.Context, id string) (SandboxStatus, error)
	// ResumeSandbox continues a paused sandbox (VMRunning again). Resuming a
	// running sandbox succeeds.
	ResumeSandbox(ctx context.Context, id string) (SandboxStatus, error)
	// SuspendSandbox makes a durable snapshot of a running or paused
	// sandbox (memory, device state and disk of one paused instant copied
	// with sha256 checksums) and ends its VMM, releasing CPU
	// and RAM. State becomes VMSuspended; it survives a restart of the
	// worker process and of the host. On error (e.g. ErrResourceExhausted
	// when the disk is full) the sandbox is left as it was and no partial
	// snapshot remains.
	SuspendSandbox(ctx context.Context, id string) (SandboxStatus, error)
	// WakeSandbox resumes a paused sandbox or restores a suspended one
	// (checksums verified first, then the agent is handed fresh
	// entropy and the wall clock). Snapshot files missing or corrupt fail
	// with an error wrapping errdefs.ErrDataLoss and no VM is left running;
	// the files stay for inspection until DeleteSandbox. Other errors leave
	// it suspended, to be woken again.
	WakeSandbox(ctx context.Context, id string) (SandboxStatus, error)
	// Checkpoint keeps the state of a running or paused sandbox under
	// checkpointID (chosen by the caller, e.g. "ckpt_…", unique on the
	// worker). The VM is paused only while device state is saved and the
	// memory and disk files are reflinked; then it continues in the state it
	// had. A checkpoint outlives its sandbox; only DeleteCheckpoint removes it.
	Checkpoint(ctx context.Context, sandboxID, checkpointID string) (CheckpointStatus, error)
	// DeleteCheckpoint removes a checkpoint's files. Branches made from it
	// and sandboxes restored to it keep working (they own copies). Deleting
	// an unknown checkpoint succeeds. It waits for a branch or restore that
	// is reading the checkpoint at that moment.
	DeleteCheckpoint(ctx context.Context, checkpointID string) error
	// Checkpoints lists the checkpoints this worker keeps.
	Checkpoints(ctx context.Context) ([]CheckpointStatus, error)
	// RestoreCheckpoint rolls a sandbox back in place to a checkpoint of
	// that same sandbox (or of a sandbox it was branched from): its VM is
	// replaced by one restored from the checkpoint's files; the sandbox's
	// id, env and hostname stay. The sandbox may be running, paused or
	// suspended; it ends running. A corrupt checkpoint fails with
	// errdefs.ErrDataLoss before the sandbox is touched.
	RestoreCheckpoint(ctx context.Context, sandboxID, checkpointID string) (SandboxStatus, error)
	// PrepareTemplate makes the ready snapshot of spec.Template (boot once,
	// wait for the agent and the template's ready command, snapshot) for
	// the VM size in spec (VCPUs, MemoryMiB, DiskMiB; other fields are
	// ignored), so creates of that size restore instead of booting.
	// CreateSandbox does it on first use otherwise (and cold-boots when it
	// fails). Idempotent; ErrFailedPrecondition when the worker keeps no
	// ready snapshots.
	PrepareTemplate(ctx context.Context, spec SandboxSpec) error
	// ForgetTemplate removes the ready snapshots the worker keeps of a
	// template reference ("name": every build of the name;
	// "name@sha256:…": that build) and stops the pooled VMs restored from
	// them. Call it once the build is deleted. It waits for creates and
	// pool fills reading those snapshots; sandboxes made from them keep
	// working (they own copies). Idempotent: a reference with no snapshot
	// succeeds.
	ForgetTemplate(ctx context.Context, ref string) error
}
