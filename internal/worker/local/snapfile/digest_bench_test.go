package snapfile

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/storage"
)

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchMemFile writes a file shaped like a 256 MiB guest's suspended
// memory on the worker's data volume: 256 MiB apparent, ~148 MiB of
// random data in runs of 64 KiB..8 MiB, holes between them.
func benchMemFile(b *testing.B) (*storage.Store, string) {
	b.Helper()
	ctx := context.Background()
	st, err := storage.Open(ctx, storage.Config{DataDir: b.TempDir(), ImageSizeGiB: 4}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Unmount(context.Background()) })
	path := filepath.Join(st.Root(), "memory")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const size = 256 << 20
	if err := f.Truncate(size); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 8<<20)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	var data int64
	for off := int64(0); off < size && data < 148<<20; {
		n := min(int64(64<<10)<<r.IntN(8), size-off)
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			b.Fatal(err)
		}
		data += n
		off += n + int64(r.IntN(4))*(64<<10)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return st, path
}

// BenchmarkFileDigest: FileDigest of a suspended memory file, hot (in the
// page cache, as the suspend left it) and cold (a fresh reflink copy, as a
// wake verifies: shared extents, no page cache of its own). cpu-ms/op is
// this process's CPU (the hashers, and the page-cache fill the reads
// cause); the loop device's and btrfs's kernel threads are not in it.
// Needs root (the data volume is a loop-mounted btrfs image here).
func BenchmarkFileDigest(b *testing.B) {
	st, path := benchMemFile(b)
	ctx := context.Background()
	b.Run("hot", func(b *testing.B) {
		b.SetBytes(256 << 20)
		cpu := processCPU()
		for b.Loop() {
			if _, err := FileDigest(ctx, path); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N)/1e6, "cpu-ms/op")
	})
	b.Run("cold-reflink", func(b *testing.B) {
		b.SetBytes(256 << 20)
		cp := path + ".copy"
		var cpu time.Duration
		for b.Loop() {
			b.StopTimer()
			_ = os.Remove(cp)
			if err := st.Clone(ctx, path, cp); err != nil {
				b.Fatal(err)
			}
			c0 := processCPU()
			b.StartTimer()
			if _, err := FileDigest(ctx, cp); err != nil {
				b.Fatal(err)
			}
			cpu += processCPU() - c0
		}
		b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "cpu-ms/op")
	})
}
