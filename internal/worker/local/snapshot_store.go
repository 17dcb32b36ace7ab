package local

import (
	"context"
	"encoding/json"
)

// SnapshotStore keeps suspend snapshots off the worker, in object storage,
// so that a sandbox suspended here can wake on any worker.
// objstore.Snapshots implements it over a bucket and the worker's bounded
// download cache.
type SnapshotStore interface {
	// Put stores the files of dir (names relative to it) as snapshot name
	// with meta, and returns once the store holds all of it, verified.
	// Nothing is visible under name after a failed Put. ErrConflict when
	// name exists.
	Put(ctx context.Context, name, dir string, files []string, meta json.RawMessage) error
	// Fetch makes a verified local copy of snapshot name and returns its
	// directory (on the worker's storage volume, so its files can be
	// reflinked; read-only), its meta, and the release of the copy.
	// ErrNotFound when there is no such snapshot, ErrDataLoss when it is
	// damaged or incomplete.
	Fetch(ctx context.Context, name string) (dir string, meta json.RawMessage, release func(), err error)
	// Delete removes snapshot name; an unknown name succeeds.
	Delete(ctx context.Context, name string) error
}
