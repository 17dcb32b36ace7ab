// Package snapfile is the on-disk form of a VM snapshot: a dir of the
// driver's device state, the guest RAM (MemFile) and the root disk
// (DiskFile), sealed by a manifest (ManifestFile) written last that records
// the VM's shape and every file's size and chunked SHA-256. It owns
// sealing, reading and verifying that form, the digest, and the fsyncs and
// error classes (data loss, full disk) that go with them.
//
// It knows nothing of sandboxes, VMMs, pools or object stores: the local
// worker decides what a snapshot is of and where it lives.
package snapfile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// A snapshot dir holds what restores one VM: the driver's device state
// file(s), the guest RAM (MemFile) and the root disk (DiskFile), plus
// manifest.json written last, which seals it. A dir without a manifest is
// unfinished and is removed when found.
const (
	MemFile      = "memory"
	DiskFile     = "rootfs.ext4"
	ManifestFile = "manifest.json"
)

// Manifest records what a snapshot needs to be restored and the checksum of
// every file in it.
type Manifest struct {
	Version   int       `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	VCPUs     int       `json:"vcpus"`
	MemoryMiB int       `json:"memory_mib"`
	// Template is the build ("name@sha256:…") a template's ready snapshot
	// was made of; empty for other snapshots.
	Template string `json:"template,omitempty"`
	// DeviceSet is the device set of the snapshot's VM (devices.go); 0 in
	// manifests written before it was recorded.
	DeviceSet int `json:"device_set,omitempty"`
	// Frozen says whether the guest filesystems were frozen in the
	// snapshot, for a suspend snapshot: false in those of workers that
	// suspend without freezing (lifecycle.go), absent (nil) in those of
	// older workers, which froze them. Other snapshots never freeze and
	// leave it absent; only a wake reads it.
	Frozen *bool                `json:"frozen,omitempty"`
	Files  map[string]FileCheck `json:"files"`
}

// GuestFrozen says whether a suspend snapshot's guest filesystems are
// frozen, so the wake must thaw them: yes unless the manifest says not.
func (m Manifest) GuestFrozen() bool { return m.Frozen == nil || *m.Frozen }

type FileCheck struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // see FileDigest
}

// Seal checksums every regular file in dir and writes the manifest
// atomically (file then rename, then fsync of the dir).
func Seal(ctx context.Context, dir string, m Manifest) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("seal snapshot: %w: %v", errdefs.ErrInternal, err)
	}
	m.Version, m.Files = 1, map[string]FileCheck{}
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == ManifestFile {
			continue
		}
		if err := SyncFile(filepath.Join(dir, e.Name())); err != nil {
			return DiskError("sync snapshot file", err)
		}
		fc, err := FileDigest(ctx, filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		m.Files[e.Name()] = fc
	}
	if err := WriteJSON(filepath.Join(dir, ManifestFile), m); err != nil {
		return DiskError("write snapshot manifest", err)
	}
	return SyncDir(dir)
}

// Verify reads dir's manifest and checks every file it lists. A
// missing manifest or file, or a checksum mismatch, wraps ErrDataLoss.
func Verify(ctx context.Context, dir string) (Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return m, err
	}
	return m, VerifyFiles(ctx, dir, m)
}

// ReadManifest reads dir's manifest without checking the files.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	if err := ReadJSON(filepath.Join(dir, ManifestFile), &m); err != nil {
		return m, DataLoss("snapshot manifest unreadable", err)
	}
	if len(m.Files) == 0 || m.Files[MemFile].Size == 0 || m.Files[DiskFile].Size == 0 {
		return m, DataLoss("snapshot manifest incomplete", nil)
	}
	return m, nil
}

// VerifyFiles checks every file m lists in dir against its checksum.
func VerifyFiles(ctx context.Context, dir string, m Manifest) error {
	return VerifyFilesAt(ctx, m, func(name string) string { return filepath.Join(dir, name) })
}

// VerifyFilesAt checks every file m lists, found at path(name), against its
// checksum.
func VerifyFilesAt(ctx context.Context, m Manifest, path func(name string) string) error {
	names := make([]string, 0, len(m.Files))
	for n := range m.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		got, err := FileDigest(ctx, path(n))
		if err != nil {
			if errors.Is(err, errdefs.ErrCancelled) {
				return err
			}
			return DataLoss("snapshot file "+n+" unreadable", err)
		}
		if got != m.Files[n] {
			return DataLoss("snapshot file "+n+" does not match its checksum", nil)
		}
	}
	return nil
}

func DataLoss(what string, cause error) error {
	return errdefs.New(errdefs.ErrDataLoss, "the sandbox's saved state is damaged or missing").
		WithCause(fmt.Errorf("%s: %v", what, cause))
}

// DiskError classifies a failed write: a full disk is resource_exhausted.
func DiskError(what string, err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, errdefs.ErrResourceExhausted) {
		return errdefs.New(errdefs.ErrResourceExhausted, "not enough free storage on the worker").
			WithCause(fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("%s: %w: %w", what, errdefs.ErrInternal, err)
}

// chunkSize is the unit FileDigest hashes independently.
const chunkSize = 4 << 20

var (
	zeroChunkOnce sync.Once
	zeroChunkSum  [32]byte
)

// FileDigest is sha256 over the sha256 of each 4 MiB chunk of the file's
// content (the last chunk may be short). Chunks are hashed in parallel, and
// a chunk that lies entirely in a hole (sparse guest RAM) is known to be
// zeros without reading it, so a mostly-empty 1 GiB memory file costs what
// its data costs. The file is hashed where it lies in the page cache (a
// shared read-only mapping, read ahead a few chunks in front of the
// hashers) rather than copied out of it: a wake verifies some 200 MB on
// its critical path, and the copy was a fifth of the CPU that costs. A
// read error (a damaged extent) faults the mapping; the hasher recovers
// it as an error.
func FileDigest(ctx context.Context, path string) (FileCheck, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileCheck{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return FileCheck{}, err
	}
	size := st.Size()
	n := int((size + chunkSize - 1) / chunkSize)
	sums := make([][32]byte, n)
	hole := dataMap(f, size)
	zeroChunkOnce.Do(func() { zeroChunkSum = sha256.Sum256(make([]byte, chunkSize)) })
	var mapped []byte
	if size > 0 {
		if mapped, err = unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED); err != nil {
			return FileCheck{}, err
		}
		defer unix.Munmap(mapped)
	}
	chunk := func(i int) []byte {
		off := int64(i) * chunkSize
		return mapped[off:min(off+chunkSize, size)]
	}

	var (
		wg    sync.WaitGroup
		next  = make(chan int)
		errMu sync.Mutex
		ferr  error
	)
	workers := min(runtime.GOMAXPROCS(0), 4)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c := chunk(i)
				if len(c) == chunkSize && hole(int64(i)*chunkSize, chunkSize) {
					sums[i] = zeroChunkSum
					continue
				}
				sum, err := hashMapped(c)
				if err != nil {
					errMu.Lock()
					ferr = err
					errMu.Unlock()
					continue
				}
				sums[i] = sum
			}
		}()
	}
	const lookahead = 2
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		if j := i + lookahead; j < n && !hole(int64(j)*chunkSize, int64(len(chunk(j)))) {
			_ = unix.Madvise(chunk(j), unix.MADV_WILLNEED)
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if ctx.Err() != nil {
		return FileCheck{}, fmt.Errorf("checksum %s: %w", filepath.Base(path), errdefs.ErrCancelled)
	}
	if ferr != nil {
		return FileCheck{}, ferr
	}
	h := sha256.New()
	for i := range sums {
		h.Write(sums[i][:])
	}
	return FileCheck{Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// hashMapped hashes b, part of a file mapping; a fault reading it (an I/O
// error, the file cut short) is returned, not a crash.
func hashMapped(b []byte) (sum [32]byte, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("read fault: %v", r)
		}
	}()
	return sha256.Sum256(b), nil
}

// dataMap returns a function telling whether [off, off+l) is all hole,
// from the file's SEEK_DATA map taken once (the file must not change).
func dataMap(f *os.File, size int64) func(off, l int64) bool {
	type span struct{ start, end int64 }
	var data []span
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil {
			break // ENXIO: no data after off
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			end = size
		}
		data = append(data, span{start, end})
		off = end
	}
	return func(off, l int64) bool {
		i := sort.Search(len(data), func(i int) bool { return data[i].end > off })
		return i == len(data) || data[i].start >= off+l
	}
}

func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w: %v", filepath.Base(dir), errdefs.ErrInternal, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return DiskError("sync snapshot dir", err)
	}
	return nil
}

// syncFile flushes one file's data to disk.
func SyncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// DirBytes sums the allocated bytes of the regular files directly in dir.
func DirBytes(dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if e.Type().IsRegular() {
			n += AllocatedBytes(filepath.Join(dir, e.Name()))
		}
	}
	return n
}

// AllocatedBytes is the space a file occupies on disk (0 when unknown).
// Shared reflinked extents are counted in full; it is an upper bound.
func AllocatedBytes(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// WriteJSON writes v to path atomically (a temporary file, then rename).
func WriteJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadJSON reads path into v.
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
