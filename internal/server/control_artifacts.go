package server

import (
	"context"
	"fmt"

	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker/local"
)

// What a control replica keeps in the object store: the template builds it
// makes (by digest, for every worker to fetch on first use) and, read and
// deleted only, the checkpoints the workers upload.

// controlSnapshots is placement's view of the object store; nil (branches
// pinned to the checkpoint's worker) without --object-store.
func controlSnapshots(obj *objstore.Store) placement.SnapshotStore {
	if obj == nil {
		return nil
	}
	return objstore.Snapshots{Store: obj}
}

// publishImage puts a template build's files in the object store under its
// digest, where every worker fetches them on first use: the last step of a
// worker's build for the control plane (worker_templates.go). Nil without
// an object store (the build stays where it was made).
func publishImage(obj *objstore.Store) func(ctx context.Context, dir string, m template.Metadata) error {
	if obj == nil {
		return nil
	}
	return func(ctx context.Context, dir string, m template.Metadata) error {
		if _, err := obj.PutImage(ctx, m.Digest, dir, local.ImageFiles); err != nil {
			return fmt.Errorf("store template %s in object storage: %w", m.Ref(), err)
		}
		return nil
	}
}
