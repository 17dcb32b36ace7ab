package server

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/testenv/s3test"
	"github.com/space-sandbox/space/internal/worker"
)

// TestControlArtifacts: a control replica's Publish hook puts a build's
// files in the object store under its digest, where a worker finds them;
// placement's view reads the checkpoints workers store there. Without an
// object store there is neither.
func TestControlArtifacts(t *testing.T) {
	if publishImage(nil) != nil || controlSnapshots(nil) != nil {
		t.Fatal("without --object-store a build must stay local and branches pinned")
	}
	srv := s3test.New(t, "space-control")
	loc, err := objstore.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obj, err := objstore.Open(ctx, loc, objstore.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()

	m := template.Metadata{Name: "tiny", Digest: "sha256:" + string(bytes.Repeat([]byte("c"), 64))}
	build := t.TempDir()
	image := bytes.Repeat([]byte("ext4 image "), 100000)
	for name, data := range map[string][]byte{template.MetadataFile: []byte(`{"name":"tiny"}`), template.ImageFile: image} {
		if err := os.WriteFile(filepath.Join(build, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := publishImage(obj)(ctx, build, m); err != nil {
		t.Fatal(err)
	}
	got := t.TempDir()
	if _, err := obj.GetImage(ctx, m.Digest, got); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(got, template.ImageFile)); err != nil || !bytes.Equal(b, image) {
		t.Fatalf("published image read back: %d bytes, %v", len(b), err)
	}
	if err := publishImage(obj)(ctx, t.TempDir(), m); err != nil {
		t.Errorf("publishing a build stored already: %v (an image is put once)", err)
	}

	view := controlSnapshots(obj)
	if _, _, err := view.Meta(ctx, worker.CheckpointSnapshot("ckpt_none")); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("meta of a checkpoint nobody stored: %v, want not_found", err)
	}
}
