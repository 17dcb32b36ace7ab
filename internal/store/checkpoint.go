package store

import "time"

// CheckpointState is a checkpoint's state.
type CheckpointState string

// Checkpoint states: creating until its checkpoint operation has copied the
// sandbox's state, then ready (usable for branches and restores) or failed.
const (
	CheckpointCreating CheckpointState = "creating"
	CheckpointReady    CheckpointState = "ready"
	CheckpointFailed   CheckpointState = "failed"
)

// Checkpoint is the control-plane record of a kept sandbox state. The worker
// holds its files; the record outlives the sandbox it was taken of. The
// template and sizes are the sandbox's at the checkpoint, so a branch can be
// sized without reading the (possibly deleted) sandbox.
type Checkpoint struct {
	ID             string          `json:"id"` // "ckpt_…"
	TenantID       string          `json:"tenant_id"`
	SandboxID      string          `json:"sandbox_id"`
	Name           string          `json:"name"`
	Parent         string          `json:"parent,omitempty"` // the checkpoint the sandbox came from, if any
	State          CheckpointState `json:"state"`
	Template       string          `json:"template"`
	TemplateDigest string          `json:"template_digest"`
	VCPUs          int             `json:"vcpus"`
	MemoryMiB      int             `json:"memory_mib"`
	DiskMiB        int             `json:"disk_mib"`
	Worker         string          `json:"worker,omitempty"`
	SizeBytes      int64           `json:"size_bytes"`
	CreatedAt      time.Time       `json:"created_at"`
}

// CheckpointFilter selects checkpoints, ordered by (created_at, id).
type CheckpointFilter struct {
	TenantID  string // AnyTenant for all
	SandboxID string // empty: any
	PageRequest
}
