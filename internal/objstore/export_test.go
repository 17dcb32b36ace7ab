package objstore

// ChunkKey is the bucket key of chunk index of file fi of m (for tests that
// damage a chunk in the bucket).
func (s *Store) ChunkKey(m *Manifest, fi int, index int64) string {
	return s.chunkKey(m.Upload, fi, index)
}

// ManifestKey is the bucket key of a snapshot's manifest.
func (s *Store) ManifestKey(name string) string { return s.manifestKey(kindSnapshot, name) }
