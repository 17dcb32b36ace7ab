package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// A snapshot dir holds what restores one VM: the driver's device state
// file(s), the guest RAM (memFile) and the root disk (diskFile), plus
// manifest.json written last, which seals it. A dir without a manifest is
// unfinished and is removed when found.
const (
	memFile      = "memory"
	manifestFile = "manifest.json"
)

// manifest records what a snapshot needs to be restored and the checksum of
// every file in it.
type manifest struct {
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
	Files  map[string]fileCheck `json:"files"`
}

// guestFrozen says whether a suspend snapshot's guest filesystems are
// frozen, so the wake must thaw them: yes unless the manifest says not.
func (m manifest) guestFrozen() bool { return m.Frozen == nil || *m.Frozen }

type fileCheck struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // see fileDigest
}

// sealSnapshot checksums every regular file in dir and writes the manifest
// atomically (file then rename, then fsync of the dir).
func sealSnapshot(ctx context.Context, dir string, m manifest) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("seal snapshot: %w: %v", errdefs.ErrInternal, err)
	}
	m.Version, m.Files = 1, map[string]fileCheck{}
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == manifestFile {
			continue
		}
		if err := syncFile(filepath.Join(dir, e.Name())); err != nil {
			return diskError("sync snapshot file", err)
		}
		fc, err := fileDigest(ctx, filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		m.Files[e.Name()] = fc
	}
	if err := writeJSON(filepath.Join(dir, manifestFile), m); err != nil {
		return diskError("write snapshot manifest", err)
	}
	return syncDir(dir)
}

// verifySnapshot reads dir's manifest and checks every file it lists. A
// missing manifest or file, or a checksum mismatch, wraps ErrDataLoss.
func verifySnapshot(ctx context.Context, dir string) (manifest, error) {
	m, err := readManifest(dir)
	if err != nil {
		return m, err
	}
	return m, verifyFiles(ctx, dir, m)
}

// readManifest reads dir's manifest without checking the files.
func readManifest(dir string) (manifest, error) {
	var m manifest
	if err := readJSON(filepath.Join(dir, manifestFile), &m); err != nil {
		return m, dataLoss("snapshot manifest unreadable", err)
	}
	if len(m.Files) == 0 || m.Files[memFile].Size == 0 || m.Files[diskFile].Size == 0 {
		return m, dataLoss("snapshot manifest incomplete", nil)
	}
	return m, nil
}

// verifyFiles checks every file m lists in dir against its checksum.
func verifyFiles(ctx context.Context, dir string, m manifest) error {
	return verifyFilesAt(ctx, m, func(name string) string { return filepath.Join(dir, name) })
}

// verifyFilesAt checks every file m lists, found at path(name), against its
// checksum.
func verifyFilesAt(ctx context.Context, m manifest, path func(name string) string) error {
	names := make([]string, 0, len(m.Files))
	for n := range m.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		got, err := fileDigest(ctx, path(n))
		if err != nil {
			if errors.Is(err, errdefs.ErrCancelled) {
				return err
			}
			return dataLoss("snapshot file "+n+" unreadable", err)
		}
		if got != m.Files[n] {
			return dataLoss("snapshot file "+n+" does not match its checksum", nil)
		}
	}
	return nil
}

func dataLoss(what string, cause error) error {
	return errdefs.New(errdefs.ErrDataLoss, "the sandbox's saved state is damaged or missing").
		WithCause(fmt.Errorf("%s: %v", what, cause))
}

// diskError classifies a failed write: a full disk is resource_exhausted.
func diskError(what string, err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, errdefs.ErrResourceExhausted) {
		return errdefs.New(errdefs.ErrResourceExhausted, "not enough free storage on the worker").
			WithCause(fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("%s: %w: %w", what, errdefs.ErrInternal, err)
}

// chunkSize is the unit fileDigest hashes independently.
const chunkSize = 4 << 20

var (
	zeroChunkOnce sync.Once
	zeroChunkSum  [32]byte
)

// fileDigest is sha256 over the sha256 of each 4 MiB chunk of the file's
// content (the last chunk may be short). Chunks are hashed in parallel, and
// a chunk that lies entirely in a hole (sparse guest RAM) is known to be
// zeros without reading it, so a mostly-empty 1 GiB memory file costs what
// its data costs. The file is hashed where it lies in the page cache (a
// shared read-only mapping, read ahead a few chunks in front of the
// hashers) rather than copied out of it: a wake verifies some 200 MB on
// its critical path, and the copy was a fifth of the CPU that costs. A
// read error (a damaged extent) faults the mapping; the hasher recovers
// it as an error.
func fileDigest(ctx context.Context, path string) (fileCheck, error) {
	f, err := os.Open(path)
	if err != nil {
		return fileCheck{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fileCheck{}, err
	}
	size := st.Size()
	n := int((size + chunkSize - 1) / chunkSize)
	sums := make([][32]byte, n)
	hole := dataMap(f, size)
	zeroChunkOnce.Do(func() { zeroChunkSum = sha256.Sum256(make([]byte, chunkSize)) })
	var mapped []byte
	if size > 0 {
		if mapped, err = unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED); err != nil {
			return fileCheck{}, err
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
		return fileCheck{}, fmt.Errorf("checksum %s: %w", filepath.Base(path), errdefs.ErrCancelled)
	}
	if ferr != nil {
		return fileCheck{}, ferr
	}
	h := sha256.New()
	for i := range sums {
		h.Write(sums[i][:])
	}
	return fileCheck{Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
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

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w: %v", filepath.Base(dir), errdefs.ErrInternal, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return diskError("sync snapshot dir", err)
	}
	return nil
}

// syncFile flushes one file's data to disk.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// dirBytes sums the allocated bytes of the regular files directly in dir.
func dirBytes(dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if e.Type().IsRegular() {
			n += allocatedBytes(filepath.Join(dir, e.Name()))
		}
	}
	return n
}
