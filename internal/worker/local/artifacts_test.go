package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/testenv/s3test"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local"
)

// artifactStore is a real SeaweedFS and, per worker, a Snapshots view with
// a bounded cache on that worker's storage volume.
type artifactStore struct {
	srv   *s3test.Server
	store *objstore.Store
}

func newArtifactStore(t *testing.T) *artifactStore {
	t.Helper()
	srv := s3test.New(t, "space-artifacts")
	loc, err := objstore.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := objstore.Open(ctx, loc, objstore.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return &artifactStore{srv: srv, store: st}
}

// view gives a worker env its own cache (on its volume, so fetched files
// reflink) over the shared store.
func (a *artifactStore) view(t *testing.T, e *env) objstore.Snapshots {
	t.Helper()
	c, err := objstore.OpenCache(filepath.Join(e.cfg.Storage.Root(), "object-cache"), 2<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	return objstore.Snapshots{Store: a.store, Cache: c}
}

// corruptOneChunk overwrites one stored chunk of snapshot name straight in
// the bucket, as a failing disk or an operator might.
func (a *artifactStore) corruptOneChunk(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := a.srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	prefix := a.store.Location().Prefix
	key := func(parts ...string) string {
		k := prefix
		for _, p := range parts {
			if k != "" {
				k += "/"
			}
			k += p
		}
		return k
	}
	obj, err := client.GetObject(ctx, a.srv.Bucket, key("manifests", "snapshots", name)+".json", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(obj)
	obj.Close()
	if err != nil {
		t.Fatal(err)
	}
	var m objstore.Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	for fi, f := range m.Files {
		if len(f.Chunks) == 0 {
			continue
		}
		c := f.Chunks[0]
		garbage := bytes.Repeat([]byte{0x5a}, int(c.Stored))
		if _, err := client.PutObject(ctx, a.srv.Bucket, key("chunks", m.Upload, strconv.Itoa(fi), strconv.FormatInt(c.Index, 10)),
			bytes.NewReader(garbage), int64(len(garbage)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("snapshot %s has no data chunk", name)
}

// TestArtifactsAcrossWorkers: two workers on one host, each with its own
// data dir and templates dir, sharing a real object store. A checkpoint
// taken on A is branched on B (its files and its running process there)
// and restored on B; a template image only A's templates dir holds is
// used by B through the store; a checkpoint with a damaged chunk is
// ErrDataLoss on B before anything is touched; deleting a checkpoint
// removes its object.
func TestArtifactsAcrossWorkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	objects := newArtifactStore(t)
	envA, envB := newEnv(t), newEnv(t)
	for _, e := range []*env{envA, envB} {
		e.cfg.DisableSnapshots, e.cfg.PoolSize = true, -1 // cold boots: this test is about moving state
	}
	envA.cfg.Snapshots, envB.cfg.Snapshots = objects.view(t, envA), objects.view(t, envB)
	base, err := template.Load(envA.cfg.TemplatesDir, "base")
	if err != nil {
		t.Fatal(err)
	}
	// B's templates dir has no copy of the build: only the store has it,
	// put there as the control plane's build hook puts a new build.
	if err := os.RemoveAll(template.Dir(envB.cfg.TemplatesDir, "base")); err != nil {
		t.Fatal(err)
	}
	if err := envA.cfg.Snapshots.(local.ImageStore).PutImage(ctx, base.Digest,
		template.BuildDir(envA.cfg.TemplatesDir, "base", base.Digest), local.ImageFiles); err != nil {
		t.Fatal(err)
	}
	a, b := envA.open(), envB.open()
	t.Cleanup(func() { cleanupAll(t, a) })
	t.Cleanup(func() { cleanupAll(t, b) })
	pinned := func(id string) worker.SandboxSpec {
		s := spec(id)
		s.Template = base.Ref()
		return s
	}

	must(a.CreateSandbox(ctx, pinned("sbx_a")))(t)
	ga := agent(t, a, "sbx_a")
	fileSum := writeRandom(t, ga, "/root/kept", 1<<20)
	startCounter(t, ga)
	ck := must(a.Checkpoint(ctx, "sbx_a", "ckpt_x"))(t)
	atCk := count(t, ga)
	if ck.ID != "ckpt_x" || ck.SandboxID != "sbx_a" {
		t.Fatalf("checkpoint status %+v", ck)
	}

	t.Run("branch on another worker", func(t *testing.T) {
		must(b.CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_b1", FromCheckpoint: "ckpt_x"}))(t)
		gb := agent(t, b, "sbx_b1")
		checkFile(t, gb, "/root/kept", fileSum)
		if v := waitCount(t, gb, atCk); v <= atCk-50 {
			t.Fatalf("branch counter %d, checkpoint near %d", v, atCk)
		}
		if local, _ := b.Checkpoints(ctx); len(local) != 0 {
			t.Errorf("B lists checkpoints it never took: %+v", local)
		}
	})

	t.Run("template image fetched by digest", func(t *testing.T) {
		must(b.CreateSandbox(ctx, pinned("sbx_b2")))(t)
		if _, err := template.LoadDigest(envB.cfg.TemplatesDir, "base", base.Digest); err != nil {
			t.Fatalf("B's templates dir after the create: %v", err)
		}
		if sh(t, agent(t, b, "sbx_b2"), "test ! -e /root/kept") != 0 {
			t.Fatal("a fresh sandbox of the template has the checkpoint's file")
		}
	})

	t.Run("restore on another worker", func(t *testing.T) {
		must(b.RestoreCheckpoint(ctx, "sbx_b2", "ckpt_x"))(t)
		g := agent(t, b, "sbx_b2")
		checkFile(t, g, "/root/kept", fileSum)
		waitCount(t, g, atCk)
	})

	t.Run("damaged checkpoint is data loss before anything is touched", func(t *testing.T) {
		must(a.Checkpoint(ctx, "sbx_a", "ckpt_bad"))(t)
		objects.corruptOneChunk(t, worker.CheckpointSnapshot("ckpt_bad"))
		_, err := b.CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_b3", FromCheckpoint: "ckpt_bad"})
		if !errors.Is(err, errdefs.ErrDataLoss) {
			t.Fatalf("branch of a damaged checkpoint: %v, want data_loss", err)
		}
		if _, err := b.Sandbox(ctx, "sbx_b3"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("the failed branch left a sandbox: %v", err)
		}
		before := count(t, agent(t, b, "sbx_b2"))
		if _, err := b.RestoreCheckpoint(ctx, "sbx_b2", "ckpt_bad"); !errors.Is(err, errdefs.ErrDataLoss) {
			t.Fatalf("restore to a damaged checkpoint: %v, want data_loss", err)
		}
		wantState(t, b, "sbx_b2", worker.VMRunning)
		waitCount(t, agent(t, b, "sbx_b2"), before) // still the same process, counting on
	})

	t.Run("delete removes the object", func(t *testing.T) {
		for _, id := range []string{"ckpt_x", "ckpt_bad"} {
			if err := a.DeleteCheckpoint(ctx, id); err != nil {
				t.Fatal(err)
			}
			if _, err := objects.store.StatSnapshot(ctx, worker.CheckpointSnapshot(id)); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("checkpoint %s in the store after delete: %v", id, err)
			}
		}
		if _, err := b.CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_b4", FromCheckpoint: "ckpt_x"}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("branch of a deleted checkpoint: %v, want not_found", err)
		}
	})
}
