package objstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/space-sandbox/space/internal/errdefs"
)

// GCStats says what one GC pass removed.
type GCStats struct {
	Uploads int // abandoned uploads removed
	Objects int // chunk objects removed (of abandoned uploads and of deleted objects)
	// Deleted are the complete objects removed because Keep said no, as
	// "<kind>/<name>".
	Deleted []string
}

// The kinds of object GCOptions.Keep is asked about.
const (
	KindSnapshot = kindSnapshot // suspend snapshots ("sandboxes/<id>") and checkpoints ("checkpoints/<id>")
	KindImage    = kindImage    // template images, by digest
)

// GCOptions say what one GC pass may remove.
type GCOptions struct {
	// Grace is the age below which nothing is removed (see the rule above).
	Grace time.Duration
	// Keep says whether the complete object kind/name is still wanted; an
	// error stops the pass before anything is deleted. Nil keeps every
	// complete object: only abandoned chunks go.
	Keep func(ctx context.Context, kind, name string) (bool, error)
}

var chunkKeyPattern = regexp.MustCompile(`^([0-9a-f]{32})/`)

// GC removes the chunks no manifest refers to, once nothing has been
// written to them for grace. It is Collect without a Keep.
func (s *Store) GC(ctx context.Context, grace time.Duration) (GCStats, error) {
	return s.Collect(ctx, GCOptions{Grace: grace})
}

// storedObject is a complete object found by a pass.
type storedObject struct {
	kind, name string
	written    time.Time // the manifest's LastModified
	upload     string
}

// Collect runs one GC pass: complete objects older than the grace age
// that Keep does not want are deleted (manifest first, then chunks), then
// the chunks of uploads without a manifest whose newest chunk is older
// than the grace age. It reads every manifest first and stops on any it
// cannot read, so it never deletes the chunks of an object it failed to
// see.
func (s *Store) Collect(ctx context.Context, opts GCOptions) (GCStats, error) {
	var stats GCStats
	cutoff := time.Now().Add(-opts.Grace)
	objects, err := s.storedObjects(ctx)
	if err != nil {
		return stats, err
	}
	referenced := map[string]bool{}
	var doomed []storedObject
	for _, o := range objects {
		referenced[o.upload] = true
		if opts.Keep == nil || o.written.After(cutoff) {
			continue
		}
		keep, err := opts.Keep(ctx, o.kind, o.name)
		if err != nil {
			return stats, fmt.Errorf("gc: is %s/%s wanted: %w", o.kind, o.name, err)
		}
		if !keep {
			doomed = append(doomed, o)
		}
	}
	for _, o := range doomed {
		// Asked again: a record made since the first answer keeps it.
		if keep, err := opts.Keep(ctx, o.kind, o.name); err != nil || keep {
			if err != nil {
				return stats, fmt.Errorf("gc: is %s/%s wanted: %w", o.kind, o.name, err)
			}
			continue
		}
		deleted, n, err := s.deleteStored(ctx, o)
		if err != nil {
			return stats, fmt.Errorf("gc: %w", err)
		}
		if !deleted {
			continue // gone or stored again meanwhile
		}
		stats.Objects += n
		stats.Deleted = append(stats.Deleted, o.kind+"/"+o.name)
		s.log.InfoContext(ctx, "removed an object nobody wants", "kind", o.kind, "name", o.name, "objects", n)
	}
	abandoned, err := s.abandonedUploads(ctx, referenced, cutoff)
	if err != nil {
		return stats, err
	}
	for _, upload := range abandoned {
		n, err := s.removePrefix(ctx, s.chunkPrefix(upload))
		if err != nil {
			return stats, fmt.Errorf("gc: %w", err)
		}
		stats.Uploads++
		stats.Objects += n
		s.log.InfoContext(ctx, "removed an abandoned upload", "upload", upload, "objects", n)
	}
	return stats, nil
}

// storedObjects lists every complete object with its manifest's upload
// and write time.
func (s *Store) storedObjects(ctx context.Context) ([]storedObject, error) {
	var out []storedObject
	for _, kind := range []string{kindSnapshot, kindImage} {
		base := s.key("manifests", kind) + "/"
		for obj := range s.client.ListObjects(ctx, s.loc.Bucket, minio.ListObjectsOptions{Prefix: base, Recursive: true}) {
			if obj.Err != nil {
				return nil, s.classify("gc: list "+kind, obj.Err)
			}
			name, ok := strings.CutSuffix(strings.TrimPrefix(obj.Key, base), ".json")
			if !ok {
				continue
			}
			m, err := s.stat(ctx, kind, name)
			if errors.Is(err, errdefs.ErrNotFound) {
				continue // deleted meanwhile
			}
			if err != nil {
				return nil, fmt.Errorf("gc: %w", err)
			}
			out = append(out, storedObject{kind: kind, name: name, written: obj.LastModified, upload: m.Upload})
		}
	}
	return out, nil
}

// deleteStored removes a complete object found by the pass: its manifest,
// then the chunks of that manifest's upload. It returns whether it did and
// how many chunks it removed.
func (s *Store) deleteStored(ctx context.Context, o storedObject) (bool, int, error) {
	// A name stored again since the listing is another object: not this one.
	switch m, err := s.stat(ctx, o.kind, o.name); {
	case errors.Is(err, errdefs.ErrNotFound):
		return false, 0, nil
	case err != nil && !errors.Is(err, errdefs.ErrDataLoss):
		return false, 0, err
	case err == nil && m.Upload != o.upload:
		return false, 0, nil
	}
	if err := s.client.RemoveObject(ctx, s.loc.Bucket, s.manifestKey(o.kind, o.name), minio.RemoveObjectOptions{}); err != nil {
		return false, 0, s.classify("delete manifest of "+o.kind+"/"+o.name, err)
	}
	n, err := s.removePrefix(ctx, s.chunkPrefix(o.upload))
	if err != nil {
		return true, 0, fmt.Errorf("delete %s/%s (its manifest is gone): %w", o.kind, o.name, err)
	}
	return true, n, nil
}

// abandonedUploads lists the uploads with chunks but no manifest in
// referenced whose newest chunk was written before cutoff.
func (s *Store) abandonedUploads(ctx context.Context, referenced map[string]bool, cutoff time.Time) ([]string, error) {
	base := s.key("chunks") + "/"
	newest := map[string]time.Time{}
	for obj := range s.client.ListObjects(ctx, s.loc.Bucket, minio.ListObjectsOptions{Prefix: base, Recursive: true}) {
		if obj.Err != nil {
			return nil, s.classify("gc: list chunks", obj.Err)
		}
		match := chunkKeyPattern.FindStringSubmatch(strings.TrimPrefix(obj.Key, base))
		if match == nil || referenced[match[1]] {
			continue
		}
		if t := newest[match[1]]; obj.LastModified.After(t) {
			newest[match[1]] = obj.LastModified
		}
	}
	var out []string
	for upload, t := range newest {
		if !t.After(cutoff) {
			out = append(out, upload)
		}
	}
	return out, nil
}
