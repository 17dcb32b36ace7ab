package local

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/faultinject"
	"github.com/space-sandbox/space/internal/worker"
)

// storeTimeout bounds a clean-up call on the object store made after the
// caller's context may be gone.
const storeTimeout = 30 * time.Second

// uploadSuspend stores the sealed suspend snapshot in dir (the sandbox's
// VM still paused) under worker.SuspendSnapshot, with the
// sandbox's spec as its meta, when the worker has a SnapshotStore. Any
// object already under the name is stale — the sandbox has run since it
// was made — and is deleted first. On error the store holds nothing under
// the name and the suspend must be undone.
func (w *Worker) uploadSuspend(ctx context.Context, sb *sandbox, dir string) error {
	store := w.cfg.Snapshots
	if store == nil {
		return nil
	}
	id := sb.spec.ID
	name := worker.SuspendSnapshot(id)
	meta, err := json.Marshal(sb.spec)
	if err != nil {
		return fmt.Errorf("encode spec of %s: %w: %v", id, errdefs.ErrInternal, err)
	}
	files, err := snapshotFiles(dir)
	if err != nil {
		return err
	}
	started := time.Now()
	if err := store.Delete(ctx, name); err != nil {
		return storeError("remove the sandbox's stale snapshot from object storage", err)
	}
	faultinject.Point("suspend.uploading")
	if err := store.Put(ctx, name, dir, files, meta); err != nil {
		w.log.Error("suspend upload failed; the sandbox goes on", "sandbox", id, "err", err)
		return storeError("store the sandbox's snapshot in object storage", err)
	}
	faultinject.Point("suspend.uploaded")
	w.log.Info("suspend snapshot stored", "sandbox", id, "name", name, "took", time.Since(started).Round(time.Millisecond))
	return nil
}

// dropSuspendObject deletes sandbox id's snapshot from the object store
// once the sandbox runs again from its own copies: from then on it is
// stale. Best effort: a stale object left behind is deleted by the next
// suspend, and is never woken while the sandbox runs.
func (w *Worker) dropSuspendObject(ctx context.Context, id string) {
	if w.cfg.Snapshots == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := w.cfg.Snapshots.Delete(ctx, worker.SuspendSnapshot(id)); err != nil {
		w.log.Warn("could not delete the served suspend snapshot from object storage", "sandbox", id, "err", err)
	}
}

// snapshotFiles lists the regular files of a snapshot dir.
func snapshotFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read snapshot dir: %w: %v", errdefs.ErrInternal, err)
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			files = append(files, e.Name())
		}
	}
	return files, nil
}

// storeError is a failed object-store call in a tenant's words, keeping
// its class (unavailable, data_loss, …) and the cause for logs.
func storeError(what string, err error) error {
	class := errdefs.ClassOf(err)
	if class == errdefs.ErrInternal || class == nil {
		class = errdefs.ErrUnavailable
	}
	return errdefs.New(class, "could not %s", what).WithCause(err)
}
