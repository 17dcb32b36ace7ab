package objstore_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/testenv/s3test"
)

const testBucket = "space-test"

var (
	sharedOnce sync.Once
	shared     *s3test.Server
	sharedDir  string
	sharedErr  error
)

// TestMain stops the server the tests share (each test has a prefix of its
// own in its bucket).
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(uploadHelper())
	}
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// sharedServer is one weed for the package's tests: starting one costs
// seconds. Tests that stop the server start their own with s3test.New.
func sharedServer(t testing.TB) *s3test.Server {
	t.Helper()
	sharedOnce.Do(func() {
		// Started like s3test.New does, but outliving the first test.
		dir, err := os.MkdirTemp("", "objstore-s3-")
		if err != nil {
			sharedErr = err
			return
		}
		sharedDir = dir
		bin, err := s3test.BinaryPath(moduleRoot(t))
		if err != nil {
			sharedErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		shared, sharedErr = s3test.Start(ctx, s3test.Options{Binary: bin, DataDir: dir, Bucket: testBucket})
	})
	if sharedErr != nil {
		t.Fatalf("the shared object store: %v (build weed with: bash scripts/s3-build.sh)", sharedErr)
	}
	return shared
}

func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// openStore opens a store on srv under a prefix named for the test.
func openStore(t testing.TB, srv *s3test.Server, opts objstore.Options) *objstore.Store {
	t.Helper()
	loc, err := objstore.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	loc.Prefix = "t/" + strings.Trim(unsafeChars.ReplaceAllString(t.Name(), "-"), "-") + "-" + rand.Text()[:8] // fresh per run: -count=N reuses the server
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := objstore.Open(ctx, loc, objstore.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// bucketKeys lists the keys under the store's prefix, straight from the
// server (not through the code under test).
func bucketKeys(t testing.TB, srv *s3test.Server, s *objstore.Store, sub string) []string {
	t.Helper()
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var keys []string
	for obj := range client.ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Prefix: s.Location().Prefix + "/" + sub, Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		keys = append(keys, obj.Key)
	}
	return keys
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	r := mrand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(n >> 16)})
	r.Read(b)
	return b
}

// writeAt writes data at off in path (creating it), leaving the rest holes.
func writeAt(t testing.TB, path string, size int64, parts map[int64][]byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off, b := range parts {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
}

func fileSum(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// allocated is the bytes of disk blocks path takes.
func allocated(t testing.TB, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}
