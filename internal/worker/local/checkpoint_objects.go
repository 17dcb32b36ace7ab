package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// With a SnapshotStore (cluster mode) every checkpoint this worker takes is
// also uploaded under worker.CheckpointSnapshot(id) before Checkpoint
// returns, its worker.CheckpointStatus stored as the object's meta (so the
// control plane lists checkpoints without asking workers). A branch of a
// checkpoint, or a restore to it, on a worker that does not hold it
// fetches it into the store's bounded cache (verified chunk by chunk),
// checks it as a local one is checked, and restores from there through the
// same path as a local checkpoint.

// checkpointSource is a sealed checkpoint's files, ready to restore from:
// the worker's own copy or a fetched one, held until release.
type checkpointSource struct {
	meta    checkpointMeta
	dir     string
	release func()
}

// openCheckpoint finds checkpoint id here, or else in the object store.
// A checkpoint neither holds is ErrNotFound; a damaged fetched one is
// ErrDataLoss, reported before the caller has changed anything.
func (w *Worker) openCheckpoint(ctx context.Context, id string) (checkpointSource, error) {
	m, err := w.loadCheckpoint(id)
	if err == nil {
		return checkpointSource{meta: m, dir: w.checkpointDir(id), release: func() {}}, nil
	}
	if w.cfg.Snapshots == nil || !errors.Is(err, errdefs.ErrNotFound) {
		return checkpointSource{}, err
	}
	started := time.Now()
	dir, _, release, err := w.cfg.Snapshots.Fetch(ctx, worker.CheckpointSnapshot(id))
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return checkpointSource{}, errdefs.New(errdefs.ErrNotFound, "checkpoint %s not found", id)
	case errors.Is(err, errdefs.ErrDataLoss):
		return checkpointSource{}, snapfile.DataLoss("checkpoint "+id+" in object storage", err)
	case err != nil:
		return checkpointSource{}, fmt.Errorf("fetch checkpoint %s from object storage: %w", id, err)
	}
	if err := snapfile.ReadJSON(filepath.Join(dir, checkpointMetaFile), &m); err != nil || m.ID != id {
		release()
		return checkpointSource{}, snapfile.DataLoss("fetched checkpoint description unreadable", err)
	}
	w.log.Info("checkpoint fetched from object storage", "checkpoint", id, "took", time.Since(started).Round(time.Millisecond))
	return checkpointSource{meta: m, dir: dir, release: release}, nil
}

// uploadCheckpoint stores the sealed checkpoint in dir in the object store,
// verified, when the worker has one.
func (w *Worker) uploadCheckpoint(ctx context.Context, st worker.CheckpointStatus, dir string) error {
	if w.cfg.Snapshots == nil {
		return nil
	}
	meta, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode checkpoint %s: %w: %v", st.ID, errdefs.ErrInternal, err)
	}
	files, err := sealedFiles(dir)
	if err != nil {
		return err
	}
	started := time.Now()
	if err := w.cfg.Snapshots.Put(ctx, worker.CheckpointSnapshot(st.ID), dir, files, meta); err != nil {
		return fmt.Errorf("store checkpoint %s in object storage: %w", st.ID, err)
	}
	w.log.Info("checkpoint stored in object storage", "checkpoint", st.ID, "took", time.Since(started).Round(time.Millisecond))
	return nil
}

// deleteCheckpointObject removes the checkpoint's object, if any.
func (w *Worker) deleteCheckpointObject(ctx context.Context, id string) error {
	if w.cfg.Snapshots == nil {
		return nil
	}
	if err := w.cfg.Snapshots.Delete(ctx, worker.CheckpointSnapshot(id)); err != nil {
		return fmt.Errorf("remove checkpoint %s from object storage: %w", id, err)
	}
	return nil
}

// sealedFiles lists the regular files of a sealed snapshot dir, manifest
// included: all of them make the snapshot.
func sealedFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w: %v", filepath.Base(dir), errdefs.ErrInternal, err)
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			files = append(files, e.Name())
		}
	}
	return files, nil
}
