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
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
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
}

// VM states a worker reports.
const (
	VMRunning = "running"
	VMPaused  = "paused"
	VMStopped = "stopped" // the VMM is gone (crashed or stopped)
)

// SandboxStatus is what a worker knows of one sandbox it hosts.
type SandboxStatus struct {
	ID        string
	State     string // VMRunning, VMPaused, VMStopped
	VMMPID    int
	BootedAt  time.Time
	DiskBytes int64 // bytes allocated to the sandbox's own disk
}

// Exit is reported when a sandbox's VM stops without being asked to.
type Exit struct {
	SandboxID string
	Err       error // internal cause (console tail in details); never shown raw
}

// Worker runs sandboxes on one host.
type Worker interface {
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
	// Agent returns the client of the sandbox's guest agent. It stays valid
	// across link drops; it fails once the sandbox is gone.
	Agent(ctx context.Context, id string) (*agentclient.Client, error)
	// Exits delivers one Exit for each VM that stopped on its own.
	Exits() <-chan Exit
	// Close releases the worker's own resources; sandboxes keep running and
	// are adopted by the next worker process.
	Close() error
}
