package s3test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// EnvBinary overrides where BinaryPath looks for weed.
const EnvBinary = "SPACE_S3_WEED"

// DefaultCacheDir is where scripts/s3-build.sh puts the binary:
// <dir>/<SeaweedFS version>/weed.
const DefaultCacheDir = "/var/cache/space/s3"

var seaweedRequire = regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/seaweedfs/seaweedfs\s+(v\S+)`)

// BinaryPath is the weed binary scripts/s3-build.sh builds: $SPACE_S3_WEED
// when set, else DefaultCacheDir/<version>/weed with the version test/s3's
// go.mod requires (found from moduleRoot, the directory of SPACE's go.mod).
func BinaryPath(moduleRoot string) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		return p, nil
	}
	gomod, err := os.ReadFile(filepath.Join(moduleRoot, "test", "s3", "go.mod"))
	if err != nil {
		return "", fmt.Errorf("s3test: %v", err)
	}
	m := seaweedRequire.FindSubmatch(gomod)
	if m == nil {
		return "", fmt.Errorf("s3test: test/s3/go.mod requires no github.com/seaweedfs/seaweedfs version")
	}
	return filepath.Join(DefaultCacheDir, string(m[1]), "weed"), nil
}

// New starts a server for t with a bucket named bucket, stopped (by its
// PID) when t ends. It fails t, never skips, when the binary is missing:
// make test builds it first.
func New(t testing.TB, bucket string) *Server {
	t.Helper()
	bin, err := BinaryPath(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("s3test: no weed binary at %s (%v): run `bash scripts/s3-build.sh` (make test does)", bin, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{Binary: bin, DataDir: t.TempDir(), Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("weed log (last 4 KiB):\n%s", tail(s.LogFile, 4096))
		}
	})
	return s
}

func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.HasPrefix(data, []byte("module github.com/space-sandbox/space\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("s3test: SPACE's go.mod not found above the test's directory")
		}
		dir = parent
	}
}

func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		f.Seek(fi.Size()-n, 0)
	}
	var b bytes.Buffer
	b.ReadFrom(f)
	return b.String()
}
