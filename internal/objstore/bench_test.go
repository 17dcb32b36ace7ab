package objstore_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/objstore"
)

// memoryLike writes a 256 MiB file shaped like a guest's memory: a quarter
// never touched (holes), a quarter zeroed pages, a quarter repetitive
// (page tables, text), a quarter random (compressed or encrypted data).
func memoryLike(b *testing.B) string {
	dir := b.TempDir()
	const q = 64 * mib
	writeAt(b, filepath.Join(dir, "memory"), 4*q, map[int64][]byte{
		q:     make([]byte, q),
		2 * q: bytes.Repeat([]byte("struct page { flags; mapping; index; } "), q/39+1)[:q],
		3 * q: randBytes(q),
	})
	return dir
}

// BenchmarkTransfer uploads and downloads a 256 MiB memory-file-like
// object against the real store and reports MB/s of the file's size.
func BenchmarkTransfer(b *testing.B) {
	srv := sharedServer(b)
	s := openStore(b, srv, objstore.Options{})
	ctx := testCtx(b)
	dir := memoryLike(b)
	const size = 256 * mib
	var up, down time.Duration
	var stored int64
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("bench-%d", i)
		start := time.Now()
		m, err := s.PutSnapshot(ctx, name, dir, []string{"memory"})
		if err != nil {
			b.Fatal(err)
		}
		up += time.Since(start)
		stored = m.StoredBytes()
		out := b.TempDir()
		start = time.Now()
		if _, err := s.GetSnapshot(ctx, name, out); err != nil {
			b.Fatal(err)
		}
		down += time.Since(start)
		b.StopTimer()
		os.RemoveAll(out)
		if err := s.DeleteSnapshot(ctx, name); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(size/1e6/(up.Seconds()/n), "upload-MB/s")
	b.ReportMetric(size/1e6/(down.Seconds()/n), "download-MB/s")
	b.ReportMetric(float64(stored)/1e6, "stored-MB")
}
