package objstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/space-sandbox/space/internal/errdefs"
)

// MaxMeta bounds the metadata stored with an object (PutSnapshotMeta).
const MaxMeta = 64 << 10

// PutSnapshotMeta is PutSnapshot with meta (JSON, at most MaxMeta bytes)
// stored in the manifest, so that whoever reads the snapshot's manifest
// (StatSnapshot) learns it without downloading a file.
func (s *Store) PutSnapshotMeta(ctx context.Context, name, dir string, files []string, meta json.RawMessage) (*Manifest, error) {
	if err := checkKeyPath(name); err != nil {
		return nil, fmt.Errorf("snapshot name: %w", err)
	}
	if len(meta) > MaxMeta || (len(meta) > 0 && !json.Valid(meta)) {
		return nil, fmt.Errorf("put snapshot %s: %w: meta must be JSON of at most %d bytes", name, errdefs.ErrInvalidArgument, MaxMeta)
	}
	return s.put(ctx, kindSnapshot, name, dir, files, false, meta)
}

// VerifySnapshot checks that snapshot name is the upload m describes (the
// manifest PutSnapshot returned) and that the bucket holds every chunk m
// lists, at the size m records: ErrDataLoss when not, ErrNotFound when the
// name has no manifest. It reads no chunk's bytes (GetSnapshot checks
// those against their sha256 on the way down).
func (s *Store) VerifySnapshot(ctx context.Context, name string, m *Manifest) error {
	got, err := s.StatSnapshot(ctx, name)
	if err != nil {
		return err
	}
	if got.Upload != m.Upload || len(got.Files) != len(m.Files) {
		return fmt.Errorf("snapshot %s: %w: the stored manifest is not this upload's", name, errdefs.ErrDataLoss)
	}
	for fi, f := range got.Files {
		if f.Digest != m.Files[fi].Digest {
			return fmt.Errorf("snapshot %s: file %s: %w: the stored digest differs", name, f.Name, errdefs.ErrDataLoss)
		}
		for _, c := range f.Chunks {
			info, err := s.client.StatObject(ctx, s.loc.Bucket, s.chunkKey(got.Upload, fi, c.Index), minio.StatObjectOptions{})
			if err != nil {
				return s.chunkError(fmt.Sprintf("snapshots/%s: file %s chunk %d", name, f.Name, c.Index), err)
			}
			if info.Size != c.Stored {
				return fmt.Errorf("snapshot %s: file %s chunk %d: %w: %d bytes stored, manifest says %d",
					name, f.Name, c.Index, errdefs.ErrDataLoss, info.Size, c.Stored)
			}
		}
	}
	return nil
}

// Snapshots is the view of a Store that workers and the control plane use
// for sandbox snapshots: uploads that are verified before they count,
// downloads through a worker's bounded Cache, and the metadata stored with
// each. Cache may be nil for a user that never downloads (the control
// plane).
type Snapshots struct {
	Store *Store
	Cache *Cache
}

// Put uploads the files of dir as snapshot name with meta and verifies
// what the bucket then holds (VerifySnapshot); an upload that fails
// verification is deleted again. The name must not exist (ErrConflict).
func (s Snapshots) Put(ctx context.Context, name, dir string, files []string, meta json.RawMessage) error {
	m, err := s.Store.PutSnapshotMeta(ctx, name, dir, files, meta)
	if err != nil {
		return err
	}
	if err := s.Store.VerifySnapshot(ctx, name, m); err != nil {
		if derr := s.Delete(context.WithoutCancel(ctx), name); derr != nil {
			s.Store.log.Warn("could not delete an upload that failed verification", "name", name, "err", derr)
		}
		return err
	}
	return nil
}

// Fetch makes a verified local copy of snapshot name in the cache and
// returns its directory, the snapshot's meta, and the release of the copy
// (call it once the files were cloned or read). ErrNotFound when the name
// has no manifest, ErrDataLoss when a chunk is missing or damaged.
func (s Snapshots) Fetch(ctx context.Context, name string) (dir string, meta json.RawMessage, release func(), err error) {
	if s.Cache == nil {
		return "", nil, nil, fmt.Errorf("fetch snapshot %s: %w: no local cache", name, errdefs.ErrFailedPrecondition)
	}
	h, m, err := s.Store.CachedSnapshot(ctx, s.Cache, name)
	if err != nil {
		return "", nil, nil, err
	}
	return h.Dir, m.Meta, h.Close, nil
}

// Meta returns the meta stored with snapshot name and when its upload
// began (ErrNotFound when the name has no manifest).
func (s Snapshots) Meta(ctx context.Context, name string) (json.RawMessage, time.Time, error) {
	m, err := s.Store.StatSnapshot(ctx, name)
	if err != nil {
		return nil, time.Time{}, err
	}
	return m.Meta, m.CreatedAt, nil
}

// List returns the names of the complete snapshots under prefix.
func (s Snapshots) List(ctx context.Context, prefix string) ([]string, error) {
	return s.Store.ListSnapshots(ctx, prefix)
}

// Delete removes snapshot name; a name that does not exist succeeds.
func (s Snapshots) Delete(ctx context.Context, name string) error {
	err := s.Store.DeleteSnapshot(ctx, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	return err
}
