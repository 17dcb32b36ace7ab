package server

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

func TestWorkerObjectStoreFlags(t *testing.T) {
	cfg, err := ParseWorkerFlags([]string{"--object-store", "s3://space/p?endpoint=127.0.0.1:1&tls=false",
		"--object-store-credentials-file", "/etc/space/s3", "--cache-bytes", "1048576"})
	if err != nil {
		t.Fatal(err)
	}
	if o := cfg.ObjectStore; o.URL == "" || o.CredentialsFile != "/etc/space/s3" || o.CacheBytes != 1<<20 {
		t.Errorf("parsed %+v", o)
	}
	def, err := ParseWorkerFlags(nil)
	if err != nil || def.ObjectStore.URL != "" || def.ObjectStore.CacheBytes != DefaultCacheBytes {
		t.Errorf("defaults %+v, %v", def.ObjectStore, err)
	}
	for _, bad := range [][]string{
		{"--object-store", "http://space"},
		{"--object-store", "s3://space"}, // no endpoint
		{"--object-store-credentials-file", "/etc/space/s3"},
		{"--cache-bytes", "0"},
	} {
		if _, err := ParseWorkerFlags(bad); err == nil {
			t.Errorf("ParseWorkerFlags(%v) accepted", bad)
		}
	}
}

// An object store that does not answer fails the worker's start (it would
// otherwise fail every suspend later).
func TestOpenWorkerSnapshots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	none, closeNone, err := openWorkerSnapshots(ctx, ObjectStoreConfig{CacheBytes: 1}, t.TempDir(), log)
	if err != nil || none != nil {
		t.Fatalf("without --object-store: %v, %v", none, err)
	}
	closeNone()

	creds := filepath.Join(t.TempDir(), "s3")
	if err := os.WriteFile(creds, []byte("access_key=a\nsecret_key=b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := ObjectStoreConfig{URL: "s3://space?endpoint=127.0.0.1:1&tls=false", CredentialsFile: creds, CacheBytes: 1 << 20}
	if _, _, err := openWorkerSnapshots(ctx, cfg, t.TempDir(), log); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("unreachable store: %v, want unavailable", err)
	}
	if err := os.Chmod(creds, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openWorkerSnapshots(ctx, cfg, t.TempDir(), log); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("credentials readable by others: %v, want permission_denied", err)
	}
}
