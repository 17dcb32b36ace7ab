package apiv1

import "time"

// Usage is what a sandbox occupies on its worker, as GET /v1/sandboxes/{id}
// reports it (absent in listings). Shared (reflinked) extents count in full,
// so the numbers are upper bounds.
type Usage struct {
	// MemoryBytes is the guest RAM's memory file on the worker's disk.
	MemoryBytes int64 `json:"memory_bytes"`
	// DiskBytes is what the sandbox's own root disk allocates.
	DiskBytes int64 `json:"disk_bytes"`
	// SnapshotBytes is the suspend snapshot (suspended sandboxes only).
	SnapshotBytes int64 `json:"snapshot_bytes"`
}

// Checkpoint states.
const (
	CheckpointCreating = "creating"
	CheckpointReady    = "ready"
	CheckpointFailed   = "failed"
)

// Checkpoint is a kept state of a sandbox (disk, memory, processes) from
// which new sandboxes branch and to which a sandbox can be restored.
type Checkpoint struct {
	ID      string `json:"id"`
	Sandbox string `json:"sandbox"`
	Name    string `json:"name"`
	// Parent is the checkpoint the sandbox was branched from or last
	// restored to when this one was taken.
	Parent    string    `json:"parent,omitempty"`
	State     string    `json:"state"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateCheckpointRequest is the (optional) body of POST /v1/sandboxes/{id}/checkpoints.
type CreateCheckpointRequest struct {
	Name string `json:"name,omitempty"`
}

// CheckpointAndOperation answers POST /v1/sandboxes/{id}/checkpoints.
type CheckpointAndOperation struct {
	Checkpoint Checkpoint `json:"checkpoint"`
	Operation  Operation  `json:"operation"`
}

// CheckpointList is a page of checkpoints, oldest first.
type CheckpointList struct {
	Checkpoints   []Checkpoint `json:"checkpoints"`
	NextPageToken string       `json:"next_page_token,omitempty"`
}

// RestoreRequest is the body of POST /v1/sandboxes/{id}/restore.
type RestoreRequest struct {
	Checkpoint string `json:"checkpoint"`
}
