package server

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/worker/local"
)

// ObjectStoreConfig is where a worker keeps what must outlive it or move
// between workers (suspend snapshots), and its local cache of downloads.
type ObjectStoreConfig struct {
	// URL is the objstore location (s3://bucket/prefix?endpoint=…); empty
	// keeps suspend snapshots on the worker's disk only.
	URL string
	// CredentialsFile holds access_key= and secret_key= lines; empty reads
	// SPACE_S3_ACCESS_KEY and SPACE_S3_SECRET_KEY.
	CredentialsFile string
	// CacheBytes bounds the local cache of downloaded objects (LRU).
	CacheBytes int64
}

// DefaultCacheBytes bounds a worker's object cache unless --cache-bytes
// says otherwise.
const DefaultCacheBytes = 8 << 30

// registerObjectStoreFlags adds a worker's object-store flags to fs.
func registerObjectStoreFlags(fs *flag.FlagSet, c *ObjectStoreConfig) {
	fs.StringVar(&c.URL, "object-store", "", "s3://bucket/prefix?endpoint=host:port: suspend snapshots, checkpoints and template images go there, so a sandbox wakes or branches on any worker")
	fs.StringVar(&c.CredentialsFile, "object-store-credentials-file", "",
		"file with access_key= and secret_key= lines (default $"+objstore.EnvAccessKey+", $"+objstore.EnvSecretKey+")")
	fs.Int64Var(&c.CacheBytes, "cache-bytes", DefaultCacheBytes, "bound on the local cache of objects downloaded from --object-store (least recently used go first)")
}

func (c ObjectStoreConfig) validate() error {
	if c.CacheBytes <= 0 {
		return fmt.Errorf("--cache-bytes must be positive, not %d", c.CacheBytes)
	}
	if c.URL == "" {
		if c.CredentialsFile != "" {
			return fmt.Errorf("--object-store-credentials-file needs --object-store")
		}
		return nil
	}
	if _, err := objstore.ParseURL(c.URL); err != nil {
		return fmt.Errorf("--object-store: %w", err)
	}
	return nil
}

// openWorkerSnapshots opens the object store and the worker's download
// cache (under the storage root, so cached files can be reflinked into
// sandboxes). Without --object-store it returns nil and a no-op close.
func openWorkerSnapshots(ctx context.Context, c ObjectStoreConfig, storageRoot string, log *slog.Logger) (local.SnapshotStore, func(), error) {
	if c.URL == "" {
		return nil, func() {}, nil
	}
	loc, err := objstore.ParseURL(c.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("--object-store: %w", err)
	}
	creds, err := objstore.LoadCredentials(c.CredentialsFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--object-store-credentials-file: %w", err)
	}
	store, err := objstore.Open(ctx, loc, creds, objstore.Options{Log: log.With("component", "objstore")})
	if err != nil {
		return nil, nil, fmt.Errorf("--object-store: %w", err)
	}
	cache, err := objstore.OpenCache(filepath.Join(storageRoot, "objcache"), c.CacheBytes, log.With("component", "objcache"))
	if err != nil {
		store.Close()
		return nil, nil, fmt.Errorf("object cache: %w", err)
	}
	log.Info("object store", "location", loc.String(), "cache_bytes", c.CacheBytes)
	return objstore.Snapshots{Store: store, Cache: cache}, store.Close, nil
}
