package storage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkClone clones a 10 MiB and a 1 GiB fully written file: with
// reflinks both cost about the same. It reports times only; nothing asserts
// on them.
func BenchmarkClone(b *testing.B) {
	s := openLoop(b)
	ctx := context.Background()
	for _, size := range []int64{10 << 20, 1 << 30} {
		src := filepath.Join(s.Root(), fmt.Sprintf("src-%d", size))
		writeFile(b, src, size)
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			i := 0
			for b.Loop() {
				dst := filepath.Join(s.Root(), fmt.Sprintf("dst-%d-%d", size, i))
				i++
				if err := s.Clone(ctx, src, dst); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				os.Remove(dst)
				b.StartTimer()
			}
		})
	}
}

func writeFile(b *testing.B, path string, size int64) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for off := int64(0); off < size; off += int64(len(chunk)) {
		if _, err := f.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	// Templates are on disk before they are cloned; a clone of dirty pages
	// would time their writeback instead.
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
