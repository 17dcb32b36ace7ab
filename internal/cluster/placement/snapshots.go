package placement

import (
	"context"
	"encoding/json"
	"time"
)

// SnapshotStore is what placement reads of the object store that workers
// upload snapshots to (objstore.Snapshots implements it; the control plane
// never downloads): suspend snapshots, with the sandbox's spec as meta,
// and checkpoints, with their worker.CheckpointStatus as meta.
type SnapshotStore interface {
	// Meta returns the meta stored with snapshot name and when its
	// upload began; ErrNotFound when there is no such snapshot.
	Meta(ctx context.Context, name string) (meta json.RawMessage, created time.Time, err error)
	// List returns the names of the complete snapshots under prefix.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes snapshot name; an unknown name succeeds.
	Delete(ctx context.Context, name string) error
}
