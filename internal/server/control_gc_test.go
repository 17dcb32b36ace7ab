package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/postgres"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/testenv/s3test"
	"github.com/space-sandbox/space/internal/worker"
)

func TestParseObjectGCFlags(t *testing.T) {
	t.Setenv(StoreEnv, "")
	base := []string{"--store", "postgres://u@db/space", "--worker-token-file", "/s/token", "--admin-key-file", "/s/admin"}
	cfg, err := ParseControlFlags(base)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ObjectGC != (ObjectGCConfig{Interval: DefaultObjectGCInterval, Grace: DefaultObjectGCGrace}) {
		t.Errorf("defaults: %+v", cfg.ObjectGC)
	}
	cfg, err = ParseControlFlags(append(base, "--object-store-gc-interval", "0", "--object-store-gc-grace", "0"))
	if err != nil {
		t.Fatalf("--object-store-gc-interval 0: %v", err)
	}
	if objectGC(cfg.ObjectGC, &objstore.Store{}, nil, nil) != nil {
		t.Error("--object-store-gc-interval 0 still runs a GC loop")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(base, "--object-store-gc-interval", "-1s"), "--object-store-gc-interval"},
		{append(base, "--object-store-gc-grace", "0s"), "--object-store-gc-grace"},
	} {
		if _, err := ParseControlFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

// The leader replica collects the object store's garbage on its interval:
// the suspend snapshots of deleted and unknown sandboxes, a checkpoint
// with no record, an image no template names and the chunks of a cut
// upload go; a suspended sandbox's snapshot, a live checkpoint and the
// recorded template's image stay. Only the leader runs the passes.
func TestLeaderCollectsObjectGarbage(t *testing.T) {
	c := newControlCluster(t)
	s3 := s3test.New(t, "space-gc")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	loc, err := objstore.ParseURL(s3.URL())
	if err != nil {
		t.Fatal(err)
	}
	obj, err := objstore.Open(ctx, loc, objstore.Credentials{AccessKey: s3.AccessKey, SecretKey: s3.SecretKey}, objstore.Options{ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()

	// The records: a suspended and a deleted sandbox, a ready checkpoint.
	db, err := postgres.Open(ctx, c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tenant := &store.Tenant{Name: "gc", Quota: defaultTestQuota}
	if err := db.CreateTenant(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	sandbox := func(state store.SandboxState) string {
		sb := &store.Sandbox{ID: store.NewID(store.PrefixSandbox), TenantID: tenant.ID, Template: "base", State: state,
			VCPUs: 1, MemoryMiB: 256, CreatedAt: time.Now().UTC()}
		if err := db.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		return sb.ID
	}
	suspended, deleted := sandbox(store.SandboxSuspended), sandbox(store.SandboxDeleted)
	ck := &store.Checkpoint{TenantID: tenant.ID, SandboxID: suspended, Name: "c1", State: store.CheckpointReady, Template: "base", VCPUs: 1, MemoryMiB: 256}
	if err := db.CreateCheckpoint(ctx, ck); err != nil {
		t.Fatal(err)
	}
	tpls, err := db.ListTemplates(ctx)
	if err != nil || len(tpls) != 1 {
		t.Fatalf("templates: %v, %v", tpls, err)
	}

	// The objects.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "memory"), []byte(strings.Repeat("memory ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	wanted := []string{worker.CheckpointSnapshot(ck.ID), worker.SuspendSnapshot(suspended)} // as listed: sorted
	garbage := []string{worker.SuspendSnapshot(deleted), worker.SuspendSnapshot("sbx_nobody"), worker.CheckpointSnapshot("ckpt_nobody")}
	for _, name := range append(append([]string{"cut"}, wanted...), garbage...) {
		if _, err := obj.PutSnapshot(ctx, name, dir, []string{"memory"}); err != nil {
			t.Fatal(err)
		}
	}
	unnamed := "sha256:" + strings.Repeat("e", 64)
	for _, d := range []string{tpls[0].Digest, unnamed} {
		if _, err := obj.PutImage(ctx, d, dir, []string{"memory"}); err != nil {
			t.Fatal(err)
		}
	}
	// "cut" loses its manifest: its chunks are what a cut upload leaves.
	client, err := s3.Client()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.RemoveObject(ctx, s3.Bucket, "manifests/snapshots/cut.json" /* the bucket layout, no prefix */, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	chunks := func() int {
		n := 0
		for o := range client.ListObjects(ctx, s3.Bucket, minio.ListObjectsOptions{Prefix: "chunks/", Recursive: true}) {
			if o.Err == nil {
				n++
			}
		}
		return n
	}
	if n := chunks(); n != 8 {
		t.Fatalf("%d chunks stored, want 8 (one per object)", n)
	}

	creds := filepath.Join(t.TempDir(), "s3.credentials")
	if err := os.WriteFile(creds, []byte("access_key="+s3.AccessKey+"\nsecret_key="+s3.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withGC := func(cfg *ControlConfig) {
		cfg.ObjectStore, cfg.ObjectStoreCredentialsFile = s3.URL(), creds
		cfg.ObjectGC = ObjectGCConfig{Interval: time.Second, Grace: time.Millisecond}
	}
	c.startReplicaWith("r1", withGC)
	c.startReplicaWith("r2", withGC)

	testenv.Eventually(t, 2*time.Minute, func() error {
		names, err := obj.ListSnapshots(ctx, "")
		if err != nil {
			return err
		}
		if !slices.Equal(names, wanted) {
			return fmt.Errorf("snapshots %v, want %v", names, wanted)
		}
		if imgs, err := obj.ListImages(ctx); err != nil || !slices.Equal(imgs, []string{tpls[0].Digest}) {
			return fmt.Errorf("images %v (%v), want only %s", imgs, err, tpls[0].Digest)
		}
		if n := chunks(); n != 3 {
			return fmt.Errorf("%d chunks left, want the 3 of the wanted objects", n)
		}
		return nil
	})
	for _, name := range wanted {
		if _, err := obj.GetSnapshot(ctx, name, t.TempDir()); err != nil {
			t.Errorf("wanted object %s after GC: %v", name, err)
		}
	}
	l1, l2 := c.logs.count("who=r1", "msg=leading"), c.logs.count("who=r2", "msg=leading")
	g1, g2 := c.logs.count("who=r1", "component=object-gc"), c.logs.count("who=r2", "component=object-gc")
	if l1+l2 != 1 || (l1 == 0 && g1 > 0) || (l2 == 0 && g2 > 0) || g1+g2 == 0 {
		t.Errorf("replicas leading r1 %d, r2 %d; GC log lines r1 %d, r2 %d: want passes on the one leader only", l1, l2, g1, g2)
	}
}
