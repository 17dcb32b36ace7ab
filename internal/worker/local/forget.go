package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// Ready snapshots are a cache of template builds: each records the build it
// was made of (manifest.Template), so it can go when that build goes.
// ForgetTemplate removes them when the control plane deletes the build;
// pruneTemplateSnapshots, at start-up, removes those whose build is no
// longer on disk (deleted while no worker ran, or before this was kept).
// Two builds of equal content (same digest) under different names share one
// snapshot, recorded under the name that made it: forgetting that name
// removes it and the other name makes it again on its next create.

// ForgetTemplate implements worker.Lifecycle. It takes the lock of each
// build it forgets in turn (tpllock.go): it waits for the creates and pool
// fills of those builds, never for another template's.
func (w *Worker) ForgetTemplate(ctx context.Context, ref string) error {
	name, digest, err := template.ParseRef(ref)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range w.buildsOf(name, digest) {
		if err := w.forgetBuild(name, d); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("forget template %s: %w: %w", ref, errdefs.ErrInternal, err)
	}
	return nil
}

// buildsOf lists the digests ForgetTemplate(name[@digest]) covers: digest,
// or every build of name this worker has a ready snapshot of, knows, or
// is making one of now.
func (w *Worker) buildsOf(name, digest string) []string {
	if digest != "" {
		return []string{digest}
	}
	set := map[string]bool{}
	for _, s := range w.templateSnapshotDirs() {
		if sname, sdigest, ok := s.build(); ok && sname == name {
			set[sdigest] = true
		}
	}
	for _, d := range w.tplLocks.DigestsOf(name) {
		set[d] = true
	}
	for _, r := range w.ready.Refs() {
		if n, d, err := template.ParseRef(r); err == nil && n == name && d != "" {
			set[d] = true
		}
	}
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// forgetBuild removes the ready snapshots (and their pooled VMs) that
// name's build digest made, under that build's lock.
func (w *Worker) forgetBuild(name, digest string) error {
	defer w.tplLocks.Write(digest)()
	var errs []error
	for _, s := range w.templateSnapshotDirs() {
		sname, sdigest, ok := s.build()
		if !ok || sname != name || sdigest != digest {
			continue
		}
		if err := w.removeTemplateSnapshot(s.dir); err != nil {
			errs = append(errs, err)
			continue
		}
		w.log.Info("template ready snapshot removed", "template", s.ref, "snapshot", filepath.Base(s.dir))
	}
	w.ready.Forget(func(r string) bool {
		n, d, err := template.ParseRef(r)
		return err == nil && n == name && d == digest
	})
	return errors.Join(errs...)
}

// removeTemplateSnapshot drops the pool of snapshot dir and removes it;
// the lock of its build held.
func (w *Worker) removeTemplateSnapshot(dir string) error {
	w.pool.Forget(dir)
	key := filepath.Base(dir)
	w.ready.Drop(key)
	return os.RemoveAll(dir)
}

// pruneTemplateSnapshots removes, at start-up, the ready snapshots whose
// template build is gone, and those that do not say which build they are
// of (made before snapshots recorded it: they are made again on use).
// It runs before the worker serves, so nothing else holds a build's lock.
func (w *Worker) pruneTemplateSnapshots() {
	for _, s := range w.templateSnapshotDirs() {
		name, digest, ok := s.build()
		if ok {
			_, err := template.LoadDigest(w.cfg.TemplatesDir, name, digest)
			if errdefs.ClassOf(err) != errdefs.ErrNotFound {
				continue // there, or unreadable for now: keep it
			}
		}
		if err := w.removeTemplateSnapshot(s.dir); err != nil {
			w.log.Warn("remove stale template snapshot", "snapshot", filepath.Base(s.dir), "err", err)
			continue
		}
		w.log.Info("stale template ready snapshot removed", "template", s.ref, "snapshot", filepath.Base(s.dir))
	}
}

type templateSnapshotDir struct {
	dir string
	ref string // manifest.Template; "" when unknown
}

func (s templateSnapshotDir) build() (name, digest string, ok bool) {
	name, digest, err := template.ParseRef(s.ref)
	return name, digest, err == nil && digest != ""
}

// templateSnapshotDirs lists the sealed or unsealed template snapshot dirs
// (not the staging dirs of snapshots being made) with the build each is of.
func (w *Worker) templateSnapshotDirs() []templateSnapshotDir {
	entries, _ := os.ReadDir(w.templateSnapshotsDir())
	var out []templateSnapshotDir
	for _, e := range entries {
		if !e.IsDir() || strings.Contains(e.Name(), ".tmp-") {
			continue
		}
		s := templateSnapshotDir{dir: filepath.Join(w.templateSnapshotsDir(), e.Name())}
		var m manifest
		if snapfile.ReadJSON(filepath.Join(s.dir, manifestFile), &m) == nil {
			s.ref = m.Template
		}
		out = append(out, s)
	}
	return out
}
