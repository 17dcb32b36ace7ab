package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/testenv/s3test"
)

// bigSnapshot is 128 MiB of incompressible data in 1 MiB chunks, uploaded
// one chunk at a time: long enough to be interrupted part way.
func bigSnapshot(t *testing.T) string {
	dir := t.TempDir()
	writeAt(t, filepath.Join(dir, "memory"), 128*mib, map[int64][]byte{0: randBytes(128 * mib)})
	return dir
}

var slowOpts = objstore.Options{ChunkSize: mib, Parallel: 1}

// waitForChunks polls the bucket until the store's prefix holds more than
// before chunks, then calls stop; it gives up when done is closed.
func waitForChunks(t *testing.T, srv *s3test.Server, s *objstore.Store, before int, done <-chan struct{}, stop func()) {
	deadline := time.After(2 * time.Minute)
	for len(bucketKeys(t, srv, s, "chunks/")) <= before {
		select {
		case <-done:
			return
		case <-deadline:
			t.Error("no chunk appeared within 2 minutes")
			stop()
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
}

func TestCancelledUploadLeavesNothing(t *testing.T) {
	srv := sharedServer(t)
	s := openStore(t, srv, slowOpts)
	dir := bigSnapshot(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	done, watched := make(chan struct{}), make(chan struct{})
	go func() { waitForChunks(t, srv, s, 0, done, cancel); close(watched) }()
	_, err := s.PutSnapshot(ctx, "sbx_2/suspend", dir, []string{"memory"})
	close(done)
	<-watched
	if !errors.Is(err, errdefs.ErrCancelled) {
		t.Fatalf("PutSnapshot cancelled part way: %v, want cancelled", err)
	}
	assertInvisible(t, s, "sbx_2/suspend")
	// The failed upload removed its chunks; one the server committed after
	// the client gave up on it is left to GC.
	left := len(bucketKeys(t, srv, s, ""))
	if _, err := s.GC(testCtx(t), 0); err != nil {
		t.Fatal(err)
	}
	if keys := bucketKeys(t, srv, s, ""); len(keys) != 0 {
		t.Errorf("a cancelled upload left %d objects after GC (%d before)", len(keys), left)
	}
	t.Logf("the cancelled upload left %d chunk(s) for GC", left)
}

// TestCrashedUploadIsInvisibleAndCollected kills a process in the middle
// of an upload (it cannot clean up), then checks that the name does not
// exist and that GC removes the chunks, and only once the grace has passed.
func TestCrashedUploadIsInvisibleAndCollected(t *testing.T) {
	srv := sharedServer(t)
	s := openStore(t, srv, slowOpts)
	ctx := testCtx(t)

	// A complete snapshot beside it must survive GC.
	keepDir := t.TempDir()
	writeAt(t, filepath.Join(keepDir, "state"), 3*mib, map[int64][]byte{0: randBytes(3 * mib)})
	if _, err := s.PutSnapshot(ctx, "keep", keepDir, []string{"state"}); err != nil {
		t.Fatal(err)
	}
	kept := len(bucketKeys(t, srv, s, "chunks/"))

	dir := bigSnapshot(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1",
		"HELPER_URL="+s.Location().String(), "HELPER_ACCESS="+srv.AccessKey, "HELPER_SECRET="+srv.SecretKey,
		"HELPER_DIR="+dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForChunks(t, srv, s, kept, nil, func() { cmd.Process.Kill() })
	if err := cmd.Wait(); err == nil {
		t.Fatal("the uploading process finished before it was killed")
	}
	left := len(bucketKeys(t, srv, s, "chunks/")) - kept
	if left == 0 {
		t.Fatal("the killed upload left no chunks: nothing to test")
	}
	assertInvisible(t, s, "sbx_3/suspend")

	if st, err := s.GC(ctx, time.Hour); err != nil || st.Objects != 0 {
		t.Errorf("GC with an hour's grace = %+v, %v; want nothing removed yet", st, err)
	}
	st, err := s.GC(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Uploads != 1 || st.Objects < left {
		t.Errorf("GC = %+v; want 1 upload and at least the %d chunks seen", st, left)
	}
	if n := len(bucketKeys(t, srv, s, "chunks/")); n != kept {
		t.Errorf("after GC %d chunks, want the %d of the complete snapshot", n, kept)
	}
	out := t.TempDir()
	if _, err := s.GetSnapshot(ctx, "keep", out); err != nil {
		t.Errorf("the complete snapshot after GC: %v", err)
	}
}

func assertInvisible(t *testing.T, s *objstore.Store, name string) {
	t.Helper()
	ctx := testCtx(t)
	if names, err := s.ListSnapshots(ctx, ""); err != nil || contains(names, name) {
		t.Errorf("ListSnapshots = %v, %v; the interrupted upload must not be listed", names, err)
	}
	if _, err := s.StatSnapshot(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("StatSnapshot of an interrupted upload: %v, want not_found", err)
	}
	if _, err := s.GetSnapshot(ctx, name, t.TempDir()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSnapshot of an interrupted upload: %v, want not_found", err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

const helperEnv = "OBJSTORE_UPLOAD_HELPER"

// uploadHelper runs in the child process of the crash test: it uploads
// HELPER_DIR/memory as sbx_3/suspend until it is killed.
func uploadHelper() int {
	loc, err := objstore.ParseURL(os.Getenv("HELPER_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := objstore.Open(ctx, loc, objstore.Credentials{AccessKey: os.Getenv("HELPER_ACCESS"), SecretKey: os.Getenv("HELPER_SECRET")}, slowOpts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if _, err := s.PutSnapshot(ctx, "sbx_3/suspend", os.Getenv("HELPER_DIR"), []string{"memory"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}
