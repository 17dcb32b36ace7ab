package objstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// PutSnapshot uploads files (names relative to dir) as the snapshot name and
// returns its manifest. Names are slash-separated, e.g.
// "sbx_123/suspend-4" or "checkpoints/chk_9". A snapshot is immutable: a
// name that exists is ErrConflict. Nothing is visible under the name until
// every chunk is stored; a failed upload removes what it stored, and GC
// removes what a crashed one left.
func (s *Store) PutSnapshot(ctx context.Context, name, dir string, files []string) (*Manifest, error) {
	if err := checkKeyPath(name); err != nil {
		return nil, fmt.Errorf("snapshot name: %w", err)
	}
	return s.put(ctx, kindSnapshot, name, dir, files, false, nil)
}

// put uploads an object; when existingOK, an object already stored under
// the name is returned as it is (images are put once).
func (s *Store) put(ctx context.Context, kind, name, dir string, files []string, existingOK bool, meta json.RawMessage) (*Manifest, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("put %s/%s: %w: no files", kind, name, errdefs.ErrInvalidArgument)
	}
	seen := map[string]bool{}
	for _, f := range files {
		if err := checkFileName(f); err != nil {
			return nil, fmt.Errorf("put %s/%s: %w", kind, name, err)
		}
		if seen[f] {
			return nil, fmt.Errorf("put %s/%s: %w: file %s given twice", kind, name, errdefs.ErrInvalidArgument, f)
		}
		seen[f] = true
	}
	switch m, err := s.stat(ctx, kind, name); {
	case err == nil && existingOK:
		return m, nil
	case err == nil:
		return nil, fmt.Errorf("put %s/%s: %w: it exists", kind, name, errdefs.ErrConflict)
	case !errors.Is(err, errdefs.ErrNotFound):
		return nil, err
	}
	m := &Manifest{Version: manifestVersion, Kind: kind, Name: name, Upload: newUploadID(),
		CreatedAt: time.Now().UTC(), ChunkSize: int64(s.opts.ChunkSize), Compression: compressionZstd, Meta: meta}
	if err := s.uploadFiles(ctx, m, dir, files); err != nil {
		s.removeUpload(m.Upload)
		return nil, err
	}
	body, err := json.Marshal(m)
	if err != nil {
		s.removeUpload(m.Upload)
		return nil, fmt.Errorf("put %s/%s: manifest: %w: %v", kind, name, errdefs.ErrInternal, err)
	}
	if _, err := s.client.PutObject(ctx, s.loc.Bucket, s.manifestKey(kind, name), bytes.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{ContentType: "application/json"}); err != nil {
		s.removeUpload(m.Upload)
		return nil, s.classify("put manifest of "+kind+"/"+name, err)
	}
	s.log.DebugContext(ctx, "object stored", "kind", kind, "name", name, "size", m.Size(), "stored", m.StoredBytes())
	return m, nil
}

// removeUpload deletes the chunks of a failed upload, best effort: when it
// cannot, GC does it later. It runs on its own deadline, so it also runs
// after the caller's context is cancelled.
func (s *Store) removeUpload(upload string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.removePrefix(ctx, s.chunkPrefix(upload)); err != nil {
		s.log.Warn("could not remove the chunks of a failed upload; GC will", "upload", upload, "err", err)
	}
}

func newUploadID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// chunkJob is one data chunk on its way to the bucket.
type chunkJob struct {
	file  int
	index int64
	data  []byte // a pool buffer
	slot  *Chunk // where the stored size goes
}

// uploadFiles cuts every file into chunks, skips the all-zero ones and
// uploads the others with at most Parallel in flight, filling m.Files.
func (s *Store) uploadFiles(ctx context.Context, m *Manifest, dir string, files []string) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan chunkJob)
	var wg sync.WaitGroup
	for range s.opts.Parallel {
		wg.Go(func() {
			for j := range jobs {
				if err := s.uploadChunk(ctx, m.Upload, j); err != nil {
					cancel(err)
				}
				s.putBuf(j.data)
			}
		})
	}
	err := s.readFiles(ctx, m, dir, files, jobs)
	close(jobs)
	wg.Wait()
	if ctx.Err() != nil { // stopped early: by a failed chunk or the caller
		cause := context.Cause(ctx)
		if !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
			return cause // a chunk failed first
		}
		return s.classify("put "+m.Kind+"/"+m.Name, ctx.Err())
	}
	return err
}

func (s *Store) uploadChunk(ctx context.Context, upload string, j chunkJob) error {
	comp := s.getBuf(0)
	comp = s.enc.EncodeAll(j.data, comp[:0])
	defer s.putBuf(comp)
	key := s.chunkKey(upload, j.file, j.index)
	if _, err := s.client.PutObject(ctx, s.loc.Bucket, key, bytes.NewReader(comp), int64(len(comp)),
		minio.PutObjectOptions{ContentType: "application/zstd", DisableMultipart: true}); err != nil {
		return s.classify("put chunk", err)
	}
	j.slot.Stored = int64(len(comp))
	return nil
}

// readFiles reads the files in order, hashing each chunk, and hands the
// data chunks to the uploaders. The manifest entries are complete once
// the uploaders are done.
func (s *Store) readFiles(ctx context.Context, m *Manifest, dir string, files []string, jobs chan<- chunkJob) error {
	m.Files = make([]File, len(files))
	for fi, name := range files {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("put %s/%s: file %s: %w: %v", m.Kind, m.Name, name, classOfFileErr(err), err)
		}
		err = s.readFile(ctx, m, fi, name, f, jobs)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) readFile(ctx context.Context, m *Manifest, fi int, name string, f *os.File, jobs chan<- chunkJob) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("put %s/%s: file %s: %w: %v", m.Kind, m.Name, name, errdefs.ErrInternal, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("put %s/%s: file %s: %w: not a regular file", m.Kind, m.Name, name, errdefs.ErrInvalidArgument)
	}
	size, cs := st.Size(), m.ChunkSize
	n := chunkCount(size, cs)
	// Count the data chunks first, so the slots the uploaders fill never
	// move (the slice is not appended to while they run).
	var data []int64
	for i := range n {
		if hasData(f, i*cs, min(cs, size-i*cs)) {
			data = append(data, i)
		}
	}
	entry := File{Name: name, Size: size, Mode: uint32(st.Mode().Perm()), Chunks: make([]Chunk, 0, len(data))}
	var sums [][32]byte
	for _, i := range data {
		length := min(cs, size-i*cs)
		buf := s.getBuf(int(length))
		if n, err := f.ReadAt(buf, i*cs); n < len(buf) {
			s.putBuf(buf)
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("put %s/%s: file %s: %w: it shrank while it was read", m.Kind, m.Name, name, errdefs.ErrAborted)
			}
			return fmt.Errorf("put %s/%s: read %s: %w: %v", m.Kind, m.Name, name, errdefs.ErrInternal, err)
		}
		if isZero(buf) {
			s.putBuf(buf)
			continue
		}
		sum := sha256.Sum256(buf)
		sums = append(sums, sum)
		entry.Chunks = append(entry.Chunks, Chunk{Index: i, SHA256: hex.EncodeToString(sum[:])})
		select {
		case jobs <- chunkJob{file: fi, index: i, data: buf, slot: &entry.Chunks[len(entry.Chunks)-1]}:
		case <-ctx.Done():
			s.putBuf(buf)
			return s.classify("put "+m.Kind+"/"+m.Name, ctx.Err())
		}
	}
	// A file that grew while read would be stored torn: refuse it.
	if st2, err := f.Stat(); err != nil || st2.Size() != size || !st2.ModTime().Equal(st.ModTime()) {
		return fmt.Errorf("put %s/%s: file %s: %w: it changed while it was read", m.Kind, m.Name, name, errdefs.ErrAborted)
	}
	entry.Digest = fileDigest(size, cs, entry.Chunks, sums)
	m.Files[fi] = entry
	return nil
}

// hasData says whether [off, off+n) may hold data, asking the filesystem
// for the next data region (SEEK_DATA): a range in a hole is zero without
// reading it. Filesystems without holes report data everywhere.
func hasData(f *os.File, off, n int64) bool {
	next, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return false // no data at or after off
	}
	return err != nil || next < off+n
}

var zeroPage = make([]byte, 64<<10)

func isZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroPage))
		if !bytes.Equal(b[:n], zeroPage[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

func classOfFileErr(err error) *errdefs.Class {
	if errors.Is(err, os.ErrNotExist) {
		return errdefs.ErrNotFound
	}
	return errdefs.ErrInternal
}
