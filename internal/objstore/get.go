package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/minio/minio-go/v7"

	"github.com/space-sandbox/space/internal/errdefs"
)

// maxManifest bounds a manifest read from the bucket (a 1 TiB disk in
// 8 MiB chunks lists 131072 chunks, about 20 MiB of JSON).
const maxManifest = 64 << 20

// StatSnapshot returns the manifest of snapshot name: ErrNotFound when it
// has none (it was never stored, is being uploaded, or was deleted).
func (s *Store) StatSnapshot(ctx context.Context, name string) (*Manifest, error) {
	if err := checkKeyPath(name); err != nil {
		return nil, fmt.Errorf("snapshot name: %w", err)
	}
	return s.stat(ctx, kindSnapshot, name)
}

// GetSnapshot downloads snapshot name into dir (created if missing) and
// returns its manifest. Every chunk is checked against its sha256; a
// mismatch, a missing chunk or a damaged manifest is ErrDataLoss. Files
// appear under their names only when all of them are complete and synced;
// on failure none is left behind. Holes stay holes.
func (s *Store) GetSnapshot(ctx context.Context, name, dir string) (*Manifest, error) {
	m, err := s.StatSnapshot(ctx, name)
	if err != nil {
		return nil, err
	}
	return m, s.download(ctx, m, dir)
}

func (s *Store) stat(ctx context.Context, kind, name string) (*Manifest, error) {
	obj, err := s.client.GetObject(ctx, s.loc.Bucket, s.manifestKey(kind, name), minio.GetObjectOptions{})
	if err != nil {
		return nil, s.classify("get manifest of "+kind+"/"+name, err)
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, maxManifest+1))
	if err != nil {
		return nil, s.classify("get manifest of "+kind+"/"+name, err)
	}
	if len(data) > maxManifest {
		return nil, fmt.Errorf("manifest of %s/%s: %w: larger than %d bytes", kind, name, errdefs.ErrDataLoss, maxManifest)
	}
	return parseManifest(data, kind, name)
}

// download writes m's files into dir: each to a temporary name, sized first
// (so the holes are never written), its data chunks fetched in parallel,
// then all synced and renamed into place.
func (s *Store) download(ctx context.Context, m *Manifest, dir string) (err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("get %s/%s: %w: %v", m.Kind, m.Name, errdefs.ErrInternal, err)
	}
	temps := make([]*os.File, len(m.Files))
	defer func() {
		for _, f := range temps {
			if f != nil {
				f.Close()
				if err != nil {
					os.Remove(f.Name())
				}
			}
		}
	}()
	for i, file := range m.Files {
		path := filepath.Join(dir, file.Name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("get %s/%s: %w: %v", m.Kind, m.Name, errdefs.ErrInternal, err)
		}
		f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".part-*")
		if err != nil {
			return fmt.Errorf("get %s/%s: %w: %v", m.Kind, m.Name, errdefs.ErrInternal, err)
		}
		temps[i] = f
		if err := f.Truncate(file.Size); err != nil {
			return fmt.Errorf("get %s/%s: size %s: %w: %v", m.Kind, m.Name, file.Name, errdefs.ErrInternal, err)
		}
	}
	if err := s.fetchChunks(ctx, m, temps); err != nil {
		return err
	}
	for i, file := range m.Files {
		if err := temps[i].Chmod(os.FileMode(file.Mode)); err != nil {
			return fmt.Errorf("get %s/%s: %w: %v", m.Kind, m.Name, errdefs.ErrInternal, err)
		}
		if err := temps[i].Sync(); err != nil {
			return fmt.Errorf("get %s/%s: sync %s: %w: %v", m.Kind, m.Name, file.Name, errdefs.ErrInternal, err)
		}
	}
	for i, file := range m.Files {
		if err := os.Rename(temps[i].Name(), filepath.Join(dir, file.Name)); err != nil {
			return fmt.Errorf("get %s/%s: %w: %v", m.Kind, m.Name, errdefs.ErrInternal, err)
		}
	}
	return syncDirs(dir, m.Files)
}

// fetchChunks downloads and verifies every data chunk of m with at most
// Parallel in flight; the first failure stops the rest.
func (s *Store) fetchChunks(ctx context.Context, m *Manifest, temps []*os.File) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type job struct {
		file  int
		chunk Chunk
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range s.opts.Parallel {
		wg.Go(func() {
			for j := range jobs {
				if ctx.Err() != nil {
					continue
				}
				if err := s.fetchChunk(ctx, m, j.file, j.chunk, temps[j.file]); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for fi, f := range m.Files {
		for _, c := range f.Chunks {
			select {
			case jobs <- job{fi, c}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil {
		if errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) {
			return s.classify("get "+m.Kind+"/"+m.Name, ctx.Err())
		}
		return cause
	}
	return nil
}

func (s *Store) fetchChunk(ctx context.Context, m *Manifest, fi int, c Chunk, out *os.File) error {
	f := m.Files[fi]
	what := fmt.Sprintf("%s/%s: file %s chunk %d", m.Kind, m.Name, f.Name, c.Index)
	obj, err := s.client.GetObject(ctx, s.loc.Bucket, s.chunkKey(m.Upload, fi, c.Index), minio.GetObjectOptions{})
	if err != nil {
		return s.chunkError(what, err)
	}
	defer obj.Close()
	// One byte more than the manifest says, to see a stored chunk that is longer.
	comp := s.getBuf(int(c.Stored) + 1)
	defer s.putBuf(comp)
	n, err := io.ReadFull(obj, comp)
	switch {
	case err == nil:
		return fmt.Errorf("%s: %w: more bytes stored than the manifest says", what, errdefs.ErrDataLoss)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		if int64(n) != c.Stored {
			return fmt.Errorf("%s: %w: %d bytes stored, manifest says %d", what, errdefs.ErrDataLoss, n, c.Stored)
		}
	default:
		return s.chunkError(what, err)
	}
	length := m.chunkLen(f.Size, c.Index)
	raw := s.getBuf(int(length))
	defer s.putBuf(raw)
	raw, err = s.dec.DecodeAll(comp[:c.Stored], raw[:0])
	if err != nil {
		return fmt.Errorf("%s: %w: does not decompress: %v", what, errdefs.ErrDataLoss, err)
	}
	if int64(len(raw)) != length {
		return fmt.Errorf("%s: %w: %d bytes, want %d", what, errdefs.ErrDataLoss, len(raw), length)
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != c.SHA256 {
		return fmt.Errorf("%s: %w: checksum mismatch", what, errdefs.ErrDataLoss)
	}
	if err := writeSparse(out, raw, c.Index*m.ChunkSize); err != nil {
		return fmt.Errorf("%s: write: %w: %v", what, errdefs.ErrInternal, err)
	}
	return nil
}

// writeSparse writes data at off but skips its all-zero 4 KiB blocks, so
// they stay holes of the (pre-sized) file: a chunk that is part data, part
// zero pages takes only its data on disk.
func writeSparse(out *os.File, data []byte, off int64) error {
	const block = 4096
	for start := 0; start < len(data); {
		end := min(start+block, len(data))
		if isZero(data[start:end]) {
			start = end
			continue
		}
		run := end // extend the run over the following non-zero blocks
		for run < len(data) && !isZero(data[run:min(run+block, len(data))]) {
			run = min(run+block, len(data))
		}
		if _, err := out.WriteAt(data[start:run], off+int64(start)); err != nil {
			return err
		}
		start = run
	}
	return nil
}

// chunkError classifies a failed chunk read: a chunk the manifest lists but
// the bucket lacks is data loss, not "not found".
func (s *Store) chunkError(what string, err error) error {
	err = s.classify("get "+what, err)
	if errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("%s: %w: the chunk is missing", what, errdefs.ErrDataLoss)
	}
	return err
}

// syncDirs fsyncs dir and every directory the files were written into, so
// the renames survive a crash.
func syncDirs(dir string, files []File) error {
	dirs := map[string]bool{dir: true}
	for _, f := range files {
		dirs[filepath.Dir(filepath.Join(dir, f.Name))] = true
	}
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(d string) error {
	f, err := os.Open(d)
	if err != nil {
		return fmt.Errorf("sync %s: %w: %v", d, errdefs.ErrInternal, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w: %v", d, errdefs.ErrInternal, err)
	}
	return nil
}
