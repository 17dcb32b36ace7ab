// Package objstore keeps SPACE's large state in an S3-compatible object
// store: suspend snapshots and checkpoints (a set of files: memory, device
// state, disk, metadata) and template images by digest, so that a sandbox
// suspended on one worker can wake on another.
//
// An object is stored as zstd-compressed chunks, each with the sha256 of its
// bytes, uploaded in parallel with a bound, and a manifest written LAST: a
// name without a manifest does not exist, so a half-upload is invisible and
// GC removes its chunks. All-zero chunks (holes of sparse disk and memory
// files) are not uploaded; the manifest records which chunks hold data.
// Downloads verify every checksum and fail with errdefs.ErrDataLoss on a
// mismatch or a missing chunk. Cache is the worker's local copy of
// downloaded objects, bounded in bytes.
//
// Garbage collection (Collect, run on the control plane's leader). Two
// things become garbage: the chunks of an upload that never got its
// manifest (a crashed or cut upload, or a delete that removed the manifest
// and failed on the chunks), and complete objects nobody wants any more
// (the snapshot of a deleted sandbox, a deleted checkpoint, the image of a
// template no record names), which only the caller can judge
// (GCOptions.Keep). The rule for uploads in flight: an upload writes its
// chunks one after another (at most Parallel at a time) and its manifest
// right after the last, so while it runs its newest chunk is seconds old.
// GC removes the chunks of an upload without a manifest only when the
// newest of them is older than the grace age, and it lists the manifests
// before the chunks, so an upload that completes during a pass has fresh
// chunks and is left alone. A complete object goes only when its manifest
// was written more than the grace age ago and Keep says no twice (while
// the pass decides, and again just before the delete), and only while its
// name still holds the upload the pass saw. So the grace age must exceed
// the longest pause inside one upload, the time between an object's upload
// and the record naming it (a template is published before it is
// recorded), and the clock skew between GC's host and the store (ages are
// the store's LastModified against the local clock); an hour covers all
// three. One window is left: an image is put once (PutImage returns the
// stored one), so a template recorded again with a digest in the instant
// between GC's last Keep and its delete loses the image, and workers fail
// its fetch not_found until it is built again.
//
// It owns the bucket's layout under its prefix and nothing else: it knows
// nothing of sandboxes, the worker or the API, and never logs credentials.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Options tune a Store; the zero value is good.
type Options struct {
	// Parallel bounds the chunk transfers in flight (default 4). Memory
	// use is about 2 × Parallel × ChunkSize.
	Parallel int
	// ChunkSize is the size of the chunks new uploads are cut into
	// (default 8 MiB, 1 to 64 MiB). A download uses the manifest's size.
	ChunkSize int
	// MaxRetries is how often one request is tried before the store is
	// reported unavailable (default 3).
	MaxRetries int
	// DialTimeout bounds connecting to the endpoint (default 5s), so a
	// dead store fails fast with ErrUnavailable.
	DialTimeout time.Duration
	Log         *slog.Logger
}

const (
	defaultChunkSize = 8 << 20
	minChunkSize     = 1 << 20
	maxChunkSize     = 64 << 20
)

// Store is a handle on one bucket and prefix. It is safe for concurrent use.
type Store struct {
	client *minio.Client
	loc    Location
	opts   Options
	log    *slog.Logger
	enc    *zstd.Encoder
	dec    *zstd.Decoder
	bufs   chan []byte // chunk-sized buffers, bounding memory
}

// Open connects to the location with the credentials and checks that the
// bucket exists (ErrFailedPrecondition when not, ErrUnavailable when the
// endpoint does not answer, ErrPermissionDenied when the keys are refused).
func Open(ctx context.Context, loc Location, creds Credentials, opts Options) (*Store, error) {
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	if opts.ChunkSize == 0 {
		opts.ChunkSize = defaultChunkSize
	}
	if opts.ChunkSize < minChunkSize || opts.ChunkSize > maxChunkSize {
		return nil, fmt.Errorf("object store: %w: chunk size %d outside 1 MiB to 64 MiB", errdefs.ErrInvalidArgument, opts.ChunkSize)
	}
	if opts.MaxRetries <= 0 {
		opts.MaxRetries = 3
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if creds.AccessKey == "" || creds.SecretKey == "" {
		return nil, fmt.Errorf("object store: %w: credentials are empty", errdefs.ErrInvalidArgument)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DialContext = (&net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	transport.ResponseHeaderTimeout = time.Minute
	transport.MaxIdleConnsPerHost = 2 * opts.Parallel
	client, err := minio.New(loc.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(creds.AccessKey, creds.SecretKey, ""),
		Secure:       loc.Secure,
		Region:       loc.Region,
		BucketLookup: minio.BucketLookupPath,
		Transport:    transport,
		MaxRetries:   opts.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w: %v", loc, errdefs.ErrInvalidArgument, err)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(opts.Parallel))
	if err != nil {
		return nil, fmt.Errorf("object store: zstd: %w: %v", errdefs.ErrInternal, err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(opts.Parallel), zstd.WithDecoderMaxMemory(maxChunkSize))
	if err != nil {
		return nil, fmt.Errorf("object store: zstd: %w: %v", errdefs.ErrInternal, err)
	}
	s := &Store{client: client, loc: loc, opts: opts, log: opts.Log, enc: enc, dec: dec,
		bufs: make(chan []byte, 2*opts.Parallel+2)}
	ok, err := client.BucketExists(ctx, loc.Bucket)
	if err != nil {
		s.Close()
		return nil, s.classify("check bucket", err)
	}
	if !ok {
		s.Close()
		return nil, fmt.Errorf("object store %s: %w: bucket %s does not exist", loc, errdefs.ErrFailedPrecondition, loc.Bucket)
	}
	return s, nil
}

// Close releases the compressors. The Store must not be used after.
func (s *Store) Close() {
	s.enc.Close()
	s.dec.Close()
}

// Location is where the store keeps its objects.
func (s *Store) Location() Location { return s.loc }

// The kinds of object, each under its own key prefix.
const (
	kindSnapshot = "snapshots"
	kindImage    = "images"
)

// key joins the store's prefix and the parts of an object key.
func (s *Store) key(parts ...string) string {
	k := s.loc.Prefix
	for _, p := range parts {
		if k != "" {
			k += "/"
		}
		k += p
	}
	return k
}

func (s *Store) manifestKey(kind, name string) string {
	return s.key("manifests", kind, name) + ".json"
}

func (s *Store) chunkPrefix(upload string) string { return s.key("chunks", upload) + "/" }

func (s *Store) chunkKey(upload string, file int, index int64) string {
	return fmt.Sprintf("%s%d/%d", s.chunkPrefix(upload), file, index)
}

// classify wraps a client error in the class it belongs to: what the store
// answered (by its S3 error code or HTTP status), else an unreachable
// store, else the caller's context.
func (s *Store) classify(op string, err error) error {
	if err == nil {
		return nil
	}
	if resp := minio.ToErrorResponse(err); resp.Code != "" || resp.StatusCode != 0 {
		var class *errdefs.Class
		switch {
		case resp.Code == "NoSuchKey" || resp.Code == "NoSuchUpload":
			class = errdefs.ErrNotFound
		case resp.Code == "NoSuchBucket":
			class = errdefs.ErrFailedPrecondition
		case resp.Code == "AccessDenied" || resp.Code == "InvalidAccessKeyId" || resp.Code == "SignatureDoesNotMatch" ||
			resp.StatusCode == http.StatusForbidden:
			class = errdefs.ErrPermissionDenied
		case resp.StatusCode == http.StatusNotFound:
			class = errdefs.ErrNotFound
		case resp.Code == "SlowDown" || resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode >= 500:
			class = errdefs.ErrUnavailable
		default:
			class = errdefs.ErrInternal
		}
		return fmt.Errorf("object store: %s: %w: %s (%s)", op, class, resp.Code, resp.Message)
	}
	var netErr net.Error
	switch {
	case errors.As(err, &netErr) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("object store: %s: %w: %v", op, errdefs.ErrUnavailable, err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("object store: %s: %w", op, errdefs.ErrCancelled)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("object store: %s: %w", op, errdefs.ErrDeadlineExceeded)
	}
	// A connection cut mid-body is the store going away.
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("object store: %s: %w: %v", op, errdefs.ErrUnavailable, err)
	}
	return fmt.Errorf("object store: %s: %w: %v", op, errdefs.ErrInternal, err)
}

// getBuf returns a buffer of at least n bytes from the pool.
func (s *Store) getBuf(n int) []byte {
	select {
	case b := <-s.bufs:
		if cap(b) >= n {
			return b[:n]
		}
	default:
	}
	return make([]byte, n)
}

func (s *Store) putBuf(b []byte) {
	select {
	case s.bufs <- b[:0]:
	default:
	}
}
