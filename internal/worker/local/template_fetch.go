package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// ImageStore holds template images by digest (cluster mode: a template is
// built once, through any control replica, and every worker pulls it on
// first use). The worker uses it when its SnapshotStore implements it too,
// as objstore.Snapshots does.
type ImageStore interface {
	// PutImage stores a template build's files (names relative to dir)
	// under its digest; an image already stored is left as it is.
	PutImage(ctx context.Context, digest, dir string, files []string) error
	// FetchImage downloads the image into dir, verified; its files appear
	// only when all of them are complete. ErrNotFound when no image has
	// the digest, ErrDataLoss when it is damaged.
	FetchImage(ctx context.Context, digest, dir string) error
}

// ImageFiles are the files of a template build an ImageStore holds.
var ImageFiles = []string{template.MetadataFile, template.ImageFile}

func (w *Worker) imageStore() ImageStore {
	is, _ := w.cfg.Snapshots.(ImageStore)
	return is
}

// loadTemplate is template.Load over the worker's templates dir, but a
// build pinned by digest ("name@sha256:…") that the dir lacks is first
// fetched from the image store into it. A fetch lands in a temporary dir
// renamed into place when complete, so a half-fetched image is never
// used; concurrent creates of one build share one fetch.
func (w *Worker) loadTemplate(ctx context.Context, ref string) (template.Metadata, error) {
	tpl, err := template.Load(w.cfg.TemplatesDir, ref)
	is := w.imageStore()
	if err == nil || is == nil || !errors.Is(err, errdefs.ErrNotFound) {
		return tpl, err
	}
	name, digest, perr := template.ParseRef(ref)
	if perr != nil || digest == "" {
		return tpl, err // a name alone is resolved by the control plane, never fetched
	}
	unlock := w.imageFetches.Lock(digest)
	defer unlock()
	if tpl, err := template.LoadDigest(w.cfg.TemplatesDir, name, digest); err == nil {
		return tpl, nil // fetched meanwhile
	}
	started := time.Now()
	if err := w.fetchImage(ctx, is, name, digest); err != nil {
		return template.Metadata{}, err
	}
	tpl, err = template.LoadDigest(w.cfg.TemplatesDir, name, digest)
	if err != nil {
		return tpl, fmt.Errorf("template %s fetched but unreadable: %w", ref, err)
	}
	w.log.Info("template image fetched from object storage", "template", ref,
		"size_mib", tpl.SizeBytes>>20, "took", time.Since(started).Round(time.Millisecond))
	return tpl, nil
}

// fetchImage downloads build digest of template name into the templates dir.
func (w *Worker) fetchImage(ctx context.Context, is ImageStore, name, digest string) error {
	parent := template.Dir(w.cfg.TemplatesDir, name)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return snapfile.DiskError("templates dir", err)
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	tmp := filepath.Join(parent, ".fetch-"+hex.EncodeToString(suffix)) // not a build's name: never listed
	defer os.RemoveAll(tmp)
	if err := is.FetchImage(ctx, digest, tmp); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return errdefs.New(errdefs.ErrNotFound, "template %s@%s not found", name, digest).WithCause(err)
		}
		return fmt.Errorf("fetch template %s@%s from object storage: %w", name, digest, err)
	}
	if err := nameImage(tmp, name, digest); err != nil {
		return err
	}
	target := template.BuildDir(w.cfg.TemplatesDir, name, digest)
	if err := os.Rename(tmp, target); err != nil {
		if _, lerr := template.LoadDigest(w.cfg.TemplatesDir, name, digest); lerr == nil {
			return nil // another process installed it first
		}
		return fmt.Errorf("install fetched template: %w: %v", errdefs.ErrInternal, err)
	}
	return snapfile.SyncDir(parent)
}

// nameImage checks that the fetched build's metadata is of digest and
// makes it name's: one image (by digest) may serve templates of several
// names, and a build's metadata carries the name it is installed under.
func nameImage(dir, name, digest string) error {
	path := filepath.Join(dir, template.MetadataFile)
	var m template.Metadata
	if err := snapfile.ReadJSON(path, &m); err != nil {
		return snapfile.DataLoss("fetched template metadata unreadable", err)
	}
	if m.Digest != digest {
		return snapfile.DataLoss("fetched template metadata names another digest", fmt.Errorf("%s", m.Digest))
	}
	if m.Name == name {
		return nil
	}
	m.Name = name
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("template metadata: %w: %v", errdefs.ErrInternal, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return snapfile.DiskError("template metadata", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("template metadata: %w: %v", errdefs.ErrInternal, err)
	}
	return nil
}
