package snapfile

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFileDigest: the digest of a file with data, holes and a short last
// chunk is the sha256 of its chunks' sha256s, computed here the plain way.
func TestFileDigest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(5*chunkSize + 12345)
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	for _, off := range []int64{0, 2*chunkSize + 777, 5 * chunkSize} {
		b := make([]byte, 9000)
		_, _ = rand.Read(b)
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
		copy(data[off:], b)
	}
	f.Close()
	h := sha256.New()
	for off := int64(0); off < size; off += chunkSize {
		s := sha256.Sum256(data[off:min(off+chunkSize, size)])
		h.Write(s[:])
	}
	want := FileCheck{Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}
	got, err := FileDigest(context.Background(), path)
	if err != nil || got != want {
		t.Fatalf("FileDigest = %+v, %v; want %+v", got, err, want)
	}

	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e := sha256.New()
	if got, err := FileDigest(context.Background(), empty); err != nil || got != (FileCheck{SHA256: hex.EncodeToString(e.Sum(nil))}) {
		t.Fatalf("empty file: %+v, %v", got, err)
	}
}

// TestHashMappedFault: reading a mapping past the end of its file (cut
// short after it was mapped, as a read error also faults) is an error, not
// a crash of the worker.
func TestHashMappedFault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 4*4096), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, 4*4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if _, err := hashMapped(m); err != nil {
		t.Fatalf("whole file: %v", err)
	}
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := hashMapped(m); err == nil {
		t.Fatal("hashing past the end of the file gave no error")
	}
}
