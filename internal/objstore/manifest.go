package objstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Manifest describes one stored object: its files and every data chunk of
// them. It is written after all its chunks, so its presence says the object
// is complete.
type Manifest struct {
	Version     int       `json:"version"`
	Kind        string    `json:"kind"` // "snapshots" or "images"
	Name        string    `json:"name"`
	Upload      string    `json:"upload"` // the chunks' key prefix: chunks/<upload>/
	CreatedAt   time.Time `json:"created_at"`
	ChunkSize   int64     `json:"chunk_size"`
	Compression string    `json:"compression"`
	Files       []File    `json:"files"`
	// Meta is what the uploader stored with the object (PutSnapshotMeta),
	// e.g. the spec of a suspended sandbox; nil when none. At most MaxMeta
	// bytes of JSON.
	Meta json.RawMessage `json:"meta,omitempty"`
}

// File is one file of an object.
type File struct {
	Name string `json:"name"` // relative to the object's directory
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"` // permission bits
	// Digest is the sha256 of the file's size, the chunk size and the
	// sha256 of every chunk in order (an all-zero chunk included): it
	// covers every byte without reading the holes.
	Digest string `json:"digest"`
	// Chunks lists the chunks that hold data, by ascending index; a chunk
	// not listed is all zero and was not uploaded.
	Chunks []Chunk `json:"chunks"`
}

// Chunk is one stored piece of a file: bytes [Index×ChunkSize, +ChunkSize).
type Chunk struct {
	Index  int64  `json:"index"`
	SHA256 string `json:"sha256"` // of the uncompressed bytes
	Stored int64  `json:"stored"` // compressed size in the bucket
}

const (
	manifestVersion = 1
	compressionZstd = "zstd"
)

// StoredBytes is what the object takes in the bucket (chunks only).
func (m *Manifest) StoredBytes() int64 {
	var n int64
	for _, f := range m.Files {
		for _, c := range f.Chunks {
			n += c.Stored
		}
	}
	return n
}

// DataBytes is what the object's data chunks hold uncompressed: about what
// its files take on a disk that keeps holes.
func (m *Manifest) DataBytes() int64 {
	var n int64
	for _, f := range m.Files {
		for _, c := range f.Chunks {
			n += m.chunkLen(f.Size, c.Index)
		}
	}
	return n
}

// Size is the sum of the files' apparent sizes.
func (m *Manifest) Size() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// chunkLen is the length of chunk i of a file of the given size.
func (m *Manifest) chunkLen(size, i int64) int64 {
	return min(m.ChunkSize, size-i*m.ChunkSize)
}

func chunkCount(size, chunkSize int64) int64 { return (size + chunkSize - 1) / chunkSize }

var (
	zeroHashMu sync.Mutex
	zeroHashes = map[int64][32]byte{}
)

// zeroHash is the sha256 of n zero bytes (memoised: few lengths occur).
func zeroHash(n int64) [32]byte {
	zeroHashMu.Lock()
	defer zeroHashMu.Unlock()
	if h, ok := zeroHashes[n]; ok {
		return h
	}
	h := sha256.New()
	zero := make([]byte, min(n, 1<<20))
	for left := n; left > 0; left -= int64(len(zero)) {
		h.Write(zero[:min(left, int64(len(zero)))])
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	zeroHashes[n] = sum
	return sum
}

// fileDigest computes File.Digest from the size, chunk size and the data
// chunks' sums (sums[i] for the i-th listed chunk); the others are zero.
func fileDigest(size, chunkSize int64, chunks []Chunk, sums [][32]byte) string {
	h := sha256.New()
	h.Write([]byte("space-objstore-file-v1\n"))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(size))
	h.Write(b[:])
	binary.BigEndian.PutUint64(b[:], uint64(chunkSize))
	h.Write(b[:])
	next := 0
	for i := range chunkCount(size, chunkSize) {
		if next < len(chunks) && chunks[next].Index == i {
			h.Write(sums[next][:])
			next++
			continue
		}
		z := zeroHash(min(chunkSize, size-i*chunkSize))
		h.Write(z[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

var (
	hexSum   = regexp.MustCompile(`^[0-9a-f]{64}$`)
	uploadID = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

// checkFileName validates a file name given by a caller or read from a
// manifest: relative, clean, made of valid key segments.
func checkFileName(name string) error {
	if !filepath.IsLocal(name) || filepath.Clean(name) != name || strings.Contains(name, `\`) {
		return fmt.Errorf("%w: file name %q must be a clean relative path", errdefs.ErrInvalidArgument, name)
	}
	return checkKeyPath(name)
}

// parseManifest decodes and checks a manifest read from the bucket: every
// defect is data loss, since the object can no longer be trusted.
func parseManifest(data []byte, kind, name string) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("manifest of %s/%s: %w: %v", kind, name, errdefs.ErrDataLoss, err)
	}
	if err := m.check(kind, name); err != nil {
		return nil, fmt.Errorf("manifest of %s/%s: %w: %v", kind, name, errdefs.ErrDataLoss, err)
	}
	return &m, nil
}

func (m *Manifest) check(kind, name string) error {
	switch {
	case m.Version != manifestVersion:
		return fmt.Errorf("version %d, want %d", m.Version, manifestVersion)
	case m.Kind != kind || m.Name != name:
		return fmt.Errorf("names %s/%s", m.Kind, m.Name)
	case !uploadID.MatchString(m.Upload):
		return fmt.Errorf("upload id %q", m.Upload)
	case m.ChunkSize < minChunkSize || m.ChunkSize > maxChunkSize:
		return fmt.Errorf("chunk size %d", m.ChunkSize)
	case m.Compression != compressionZstd:
		return fmt.Errorf("compression %q", m.Compression)
	case len(m.Files) == 0:
		return fmt.Errorf("no files")
	case len(m.Meta) > MaxMeta:
		return fmt.Errorf("meta of %d bytes", len(m.Meta))
	}
	seen := map[string]bool{}
	for _, f := range m.Files {
		if err := checkFileName(f.Name); err != nil || seen[f.Name] {
			return fmt.Errorf("file name %q", f.Name)
		}
		seen[f.Name] = true
		if f.Size < 0 || f.Mode&^0o777 != 0 {
			return fmt.Errorf("file %s: size %d, mode %o", f.Name, f.Size, f.Mode)
		}
		n := chunkCount(f.Size, m.ChunkSize)
		sums := make([][32]byte, len(f.Chunks))
		for i, c := range f.Chunks {
			if c.Index < 0 || c.Index >= n || (i > 0 && c.Index <= f.Chunks[i-1].Index) {
				return fmt.Errorf("file %s: chunk index %d out of order or range", f.Name, c.Index)
			}
			if !hexSum.MatchString(c.SHA256) || c.Stored <= 0 || c.Stored > 2*maxChunkSize {
				return fmt.Errorf("file %s: chunk %d: checksum or stored size", f.Name, c.Index)
			}
			hex.Decode(sums[i][:], []byte(c.SHA256))
		}
		if got := fileDigest(f.Size, m.ChunkSize, f.Chunks, sums); got != f.Digest {
			return fmt.Errorf("file %s: digest %s does not match its chunks (%s)", f.Name, f.Digest, got)
		}
	}
	return nil
}
