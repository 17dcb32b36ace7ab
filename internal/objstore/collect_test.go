package objstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/objstore"
)

// keepAllBut is a Keep that wants every object but those named (as
// "<kind>/<name>"), counting the questions per object.
type keepAllBut struct {
	mu      sync.Mutex
	unwant  map[string]bool
	asked   map[string]int
	failOn  string // answer an error for this object
	flipOn2 string // this one is wanted from its second question on
}

func (k *keepAllBut) keep(_ context.Context, kind, name string) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	obj := kind + "/" + name
	if k.asked == nil {
		k.asked = map[string]int{}
	}
	k.asked[obj]++
	if obj == k.failOn {
		return false, errors.New("the records cannot be read")
	}
	if obj == k.flipOn2 && k.asked[obj] > 1 {
		return true, nil
	}
	return !k.unwant[obj], nil
}

// Collect removes complete objects Keep does not want once they are older
// than the grace age — the snapshot of a deleted sandbox, a deleted
// checkpoint, an image no template names — and never one Keep wants, one
// younger than the grace age, or one wanted again by the time of its
// delete; a Keep that fails stops the pass before anything is deleted.
func TestCollectRemovesUnwantedObjects(t *testing.T) {
	srv := sharedServer(t)
	s := openStore(t, srv, objstore.Options{ChunkSize: mib})
	ctx := testCtx(t)
	dir := t.TempDir()
	writeAt(t, filepath.Join(dir, "memory"), 3*mib, map[int64][]byte{0: randBytes(2 * mib)})
	snaps := []string{"sandboxes/sbx_live", "sandboxes/sbx_gone", "checkpoints/ckpt_gone", "sandboxes/sbx_again"}
	for _, name := range snaps {
		if _, err := s.PutSnapshot(ctx, name, dir, []string{"memory"}); err != nil {
			t.Fatal(err)
		}
	}
	kept, unwanted := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	for _, d := range []string{kept, unwanted} {
		if _, err := s.PutImage(ctx, d, dir, []string{"memory"}); err != nil {
			t.Fatal(err)
		}
	}
	before := len(bucketKeys(t, srv, s, ""))
	k := &keepAllBut{unwant: map[string]bool{"snapshots/sandboxes/sbx_gone": true, "snapshots/checkpoints/ckpt_gone": true,
		"images/" + unwanted: true, "snapshots/sandboxes/sbx_again": true}, flipOn2: "snapshots/sandboxes/sbx_again"}

	if st, err := s.Collect(ctx, objstore.GCOptions{Grace: time.Hour, Keep: k.keep}); err != nil || st.Objects != 0 || len(k.asked) != 0 {
		t.Fatalf("a pass with an hour's grace = %+v, %v, asked %v: want nothing removed and nothing asked", st, err, k.asked)
	}
	failing := &keepAllBut{unwant: k.unwant, failOn: "images/" + kept}
	if _, err := s.Collect(ctx, objstore.GCOptions{Keep: failing.keep}); err == nil {
		t.Fatal("a pass whose Keep failed reported no error")
	}
	if n := len(bucketKeys(t, srv, s, "")); n != before {
		t.Fatalf("a pass whose Keep failed removed %d objects", before-n)
	}

	st, err := s.Collect(ctx, objstore.GCOptions{Keep: k.keep})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(st.Deleted)
	want := []string{"images/" + unwanted, "snapshots/checkpoints/ckpt_gone", "snapshots/sandboxes/sbx_gone"}
	if !slices.Equal(st.Deleted, want) {
		t.Errorf("deleted %v, want %v (sbx_again was wanted again at its second question)", st.Deleted, want)
	}
	if st.Objects != 3*2 || st.Uploads != 0 {
		t.Errorf("removed %d chunk objects and %d uploads, want 6 chunks (2 per object) and no abandoned upload", st.Objects, st.Uploads)
	}
	names, err := s.ListSnapshots(ctx, "")
	if err != nil || !slices.Equal(names, []string{"sandboxes/sbx_again", "sandboxes/sbx_live"}) {
		t.Errorf("snapshots after the pass: %v, %v", names, err)
	}
	if imgs, err := s.ListImages(ctx); err != nil || !slices.Equal(imgs, []string{kept}) {
		t.Errorf("images after the pass: %v, %v", imgs, err)
	}
	// What is left is exactly the kept objects: a manifest and 2 chunks each.
	if n, wantN := len(bucketKeys(t, srv, s, "")), 3*3; n != wantN {
		t.Errorf("%d objects left in the bucket, want %d", n, wantN)
	}
	for _, name := range []string{"sandboxes/sbx_live", "sandboxes/sbx_again"} {
		if _, err := s.GetSnapshot(ctx, name, t.TempDir()); err != nil {
			t.Errorf("kept snapshot %s after the pass: %v", name, err)
		}
	}
}

// A pass while an upload runs leaves its chunks (the newest is seconds
// old, within the grace age) and the upload completes whole; once it has
// its manifest, a pass with no grace at all leaves it too.
func TestCollectSparesAnUploadInFlight(t *testing.T) {
	srv := sharedServer(t)
	s := openStore(t, srv, slowOpts)
	dir := bigSnapshot(t)
	ctx := testCtx(t)
	done := make(chan error, 1)
	go func() {
		_, err := s.PutSnapshot(ctx, "sandboxes/sbx_uploading", dir, []string{"memory"})
		done <- err
	}()
	passes := 0
	for uploading := true; uploading; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the upload GC ran beside failed: %v", err)
			}
			uploading = false
		case <-time.After(200 * time.Millisecond):
			if len(bucketKeys(t, srv, s, "chunks/")) == 0 {
				continue
			}
			st, err := s.Collect(ctx, objstore.GCOptions{Grace: 30 * time.Second,
				Keep: func(context.Context, string, string) (bool, error) { return false, nil }})
			if err != nil {
				t.Fatal(err)
			}
			if st.Objects != 0 {
				t.Fatalf("a pass during the upload removed %+v", st)
			}
			passes++
		}
	}
	if passes == 0 {
		t.Fatal("no pass ran while the upload did")
	}
	if st, err := s.GC(ctx, 0); err != nil || st.Objects != 0 {
		t.Errorf("GC with no grace after the upload: %+v, %v; want nothing removed", st, err)
	}
	if _, err := s.GetSnapshot(ctx, "sandboxes/sbx_uploading", t.TempDir()); err != nil {
		t.Fatalf("the upload made beside %d GC passes: %v", passes, err)
	}
	t.Logf("%d GC passes ran during the upload", passes)
}
