package local

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/faultinject"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// createFromSnapshot makes sandbox req.ID on this worker from its suspend
// snapshot in the object store (req.FromSnapshot), made by whichever
// worker suspended it: the snapshot is downloaded (verified chunk by chunk)
// into the cache, reflinked into the sandbox's suspend dir, and the
// sandbox woken from there by the one wake path (wakeSuspended, which
// checks the files against their own checksums once more before any vCPU
// runs). The spec is the one stored with the snapshot, so the sandbox has
// the vCPUs, memory, template, env and policy it was suspended with. Once
// its VM runs, the object is deleted (it is stale from then on). On any
// failure nothing is left on this worker and the object stays, for
// another try.
func (w *Worker) createFromSnapshot(ctx context.Context, req worker.SandboxSpec) (_ worker.SandboxStatus, err error) {
	store := w.cfg.Snapshots
	if store == nil {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrFailedPrecondition, "this worker has no object store to wake sandboxes from")
	}
	if req.FromSnapshot != worker.SuspendSnapshot(req.ID) {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrInvalidArgument, "sandbox %s can only wake from its own snapshot %s", req.ID, worker.SuspendSnapshot(req.ID))
	}
	sb, done, err := w.register(ctx, req)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	defer func() { done(err) }()

	started := time.Now()
	dir, meta, release, err := store.Fetch(ctx, req.FromSnapshot)
	if err != nil {
		w.log.Error("suspend snapshot not fetched", "sandbox", req.ID, "err", err)
		return worker.SandboxStatus{}, storeError("fetch the sandbox's snapshot from object storage", err)
	}
	defer release()
	fetched := time.Since(started)
	spec, err := specOfSnapshot(meta, req.ID)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	sb.mu.Lock()
	sb.spec = w.withNetwork(spec)
	sb.mu.Unlock()
	if err := os.MkdirAll(sb.path(vmDir), 0o700); err != nil {
		return worker.SandboxStatus{}, fmt.Errorf("sandbox dir: %w: %v", errdefs.ErrInternal, err)
	}
	if err := snapfile.WriteJSON(sb.path(specFile), sb.spec); err != nil {
		return worker.SandboxStatus{}, snapfile.DiskError("write sandbox spec", err)
	}
	if err := w.placeSnapshot(ctx, sb, dir); err != nil {
		return worker.SandboxStatus{}, err
	}
	release()
	if err := w.netUp(ctx, sb, false); err != nil {
		return worker.SandboxStatus{}, err
	}
	sb.mu.Lock()
	sb.suspended = true
	sb.mu.Unlock()
	faultinject.Point("wake.fetched")
	st, err := w.wakeSuspended(ctx, sb)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	w.log.Info("sandbox woken from object storage", "sandbox", req.ID, "fetch", fetched.Round(time.Millisecond),
		"took", time.Since(started).Round(time.Millisecond))
	return st, nil
}

// specOfSnapshot reads the spec stored with a suspend snapshot; it must be
// sandbox id's.
func specOfSnapshot(meta json.RawMessage, id string) (worker.SandboxSpec, error) {
	var spec worker.SandboxSpec
	if err := json.Unmarshal(meta, &spec); err != nil || spec.ID != id || spec.VCPUs < 1 || spec.MemoryMiB < 1 {
		return spec, snapfile.DataLoss("the spec stored with the suspend snapshot is unreadable or not this sandbox's",
			fmt.Errorf("meta of %d bytes (id %q): %v", len(meta), spec.ID, err))
	}
	spec.FromSnapshot, spec.FromCheckpoint = "", ""
	return spec, nil
}

// placeSnapshot reflinks the snapshot files in dir (the cache's copy) into
// sb's suspend dir: written as suspendTmp, renamed when complete.
func (w *Worker) placeSnapshot(ctx context.Context, sb *sandbox, dir string) error {
	files, err := snapshotFiles(dir)
	if err != nil {
		return err
	}
	tmp := sb.path(suspendTmp)
	_ = os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return snapfile.DiskError("suspend dir", err)
	}
	for _, f := range files {
		if err := w.cfg.Storage.Clone(ctx, filepath.Join(dir, f), filepath.Join(tmp, f)); err != nil {
			_ = os.RemoveAll(tmp)
			return w.classifyDisk("copy snapshot "+f, err)
		}
	}
	if err := snapfile.SyncDir(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, sb.path(suspendDir)); err != nil {
		_ = os.RemoveAll(tmp)
		return snapfile.DiskError("place suspend snapshot", err)
	}
	return snapfile.SyncDir(sb.dir)
}
