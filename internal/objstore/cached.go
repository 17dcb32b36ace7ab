package objstore

import (
	"context"
)

// CachedSnapshot returns a pinned handle on a verified local copy of
// snapshot name in c, downloading it when the cache lacks it (concurrent
// callers share one download). The entry is keyed by the name and its
// upload, so a name deleted and stored again is never served stale. Close
// the handle when the copy (or a reflink clone of it) is no longer read.
func (s *Store) CachedSnapshot(ctx context.Context, c *Cache, name string) (*Handle, *Manifest, error) {
	m, err := s.StatSnapshot(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	h, err := s.cached(ctx, c, m)
	return h, m, err
}

// CachedImage is CachedSnapshot for a template image.
func (s *Store) CachedImage(ctx context.Context, c *Cache, digest string) (*Handle, *Manifest, error) {
	m, err := s.StatImage(ctx, digest)
	if err != nil {
		return nil, nil, err
	}
	h, err := s.cached(ctx, c, m)
	return h, m, err
}

func (s *Store) cached(ctx context.Context, c *Cache, m *Manifest) (*Handle, error) {
	// What the files take on disk: their data plus, per file, a partial
	// block and its share of directory blocks.
	size := m.DataBytes() + int64(len(m.Files)+1)*16<<10
	return c.Get(ctx, m.Kind+"/"+m.Name+"@"+m.Upload, size, func(ctx context.Context, dir string) error {
		return s.download(ctx, m, dir)
	})
}
