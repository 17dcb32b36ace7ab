package objstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/space-sandbox/space/internal/errdefs"
)

// ListSnapshots returns the names of the complete snapshots whose names
// start with prefix ("" for all), sorted. An upload still in progress (or
// abandoned) has no manifest and is not listed.
func (s *Store) ListSnapshots(ctx context.Context, prefix string) ([]string, error) {
	return s.list(ctx, kindSnapshot, prefix)
}

func (s *Store) list(ctx context.Context, kind, prefix string) ([]string, error) {
	base := s.key("manifests", kind) + "/"
	var names []string
	for obj := range s.client.ListObjects(ctx, s.loc.Bucket, minio.ListObjectsOptions{Prefix: base + prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, s.classify("list "+kind, obj.Err)
		}
		if name, ok := strings.CutSuffix(strings.TrimPrefix(obj.Key, base), ".json"); ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// DeleteSnapshot removes snapshot name: its manifest first (from then on
// the name does not exist), then its chunks. ErrNotFound when it has no
// manifest. Chunks a failed delete leaves are garbage GC removes.
func (s *Store) DeleteSnapshot(ctx context.Context, name string) error {
	if err := checkKeyPath(name); err != nil {
		return fmt.Errorf("snapshot name: %w", err)
	}
	return s.delete(ctx, kindSnapshot, name)
}

func (s *Store) delete(ctx context.Context, kind, name string) error {
	m, err := s.stat(ctx, kind, name)
	if err != nil && !errors.Is(err, errdefs.ErrDataLoss) {
		return err
	}
	// A damaged manifest is removed all the same; its chunks become garbage.
	if err := s.client.RemoveObject(ctx, s.loc.Bucket, s.manifestKey(kind, name), minio.RemoveObjectOptions{}); err != nil {
		return s.classify("delete manifest of "+kind+"/"+name, err)
	}
	if m == nil {
		return nil
	}
	if _, err := s.removePrefix(ctx, s.chunkPrefix(m.Upload)); err != nil {
		return fmt.Errorf("delete %s/%s (its manifest is gone): %w", kind, name, err)
	}
	return nil
}

// removePrefix deletes every object whose key starts with prefix and
// returns how many it deleted.
func (s *Store) removePrefix(ctx context.Context, prefix string) (int, error) {
	var objs []minio.ObjectInfo
	for obj := range s.client.ListObjects(ctx, s.loc.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return 0, s.classify("list for delete", obj.Err)
		}
		objs = append(objs, obj)
	}
	keys := make(chan minio.ObjectInfo, len(objs))
	for _, o := range objs {
		keys <- o
	}
	close(keys)
	var firstErr error
	for rerr := range s.client.RemoveObjects(ctx, s.loc.Bucket, keys, minio.RemoveObjectsOptions{}) {
		if firstErr == nil {
			firstErr = s.classify("delete "+rerr.ObjectName, rerr.Err)
		}
	}
	if firstErr != nil {
		return 0, firstErr
	}
	return len(objs), nil
}
