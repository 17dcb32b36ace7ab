package objstore_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// snapshotDir writes a suspend-snapshot-like dir: a sparse 1 GiB memory
// file with data in a few places (one chunk half data, half zero; one run
// of zeros written as data, not as a hole), device state, a sparse disk
// whose size is not a multiple of the chunk size, an empty file and a
// metadata file in a subdirectory.
func snapshotDir(t *testing.T) (dir string, files []string) {
	dir = t.TempDir()
	writeAt(t, filepath.Join(dir, "memory"), gib, map[int64][]byte{
		0:               randBytes(3 * mib),
		512 * mib:       bytes.Repeat([]byte("guest page "), 100000),
		700 * mib:       make([]byte, 16*mib), // written zeros: must not be uploaded
		gib - 4096 - 17: randBytes(4096),
	})
	writeAt(t, filepath.Join(dir, "vmstate"), 200*1024+3, map[int64][]byte{0: randBytes(200*1024 + 3)})
	writeAt(t, filepath.Join(dir, "disk"), 64*mib+12345, map[int64][]byte{
		1 * mib: randBytes(mib), 64*mib + 12000: randBytes(345),
	})
	writeAt(t, filepath.Join(dir, "empty"), 0, nil)
	writeAt(t, filepath.Join(dir, "meta", "manifest.json"), 0, map[int64][]byte{0: []byte(`{"vcpus":1}`)})
	return dir, []string{"memory", "vmstate", "disk", "empty", "meta/manifest.json"}
}

func TestSnapshotRoundTrip(t *testing.T) {
	srv := sharedServer(t)
	s := openStore(t, srv, objstore.Options{})
	ctx := testCtx(t)
	dir, files := snapshotDir(t)

	m, err := s.PutSnapshot(ctx, "sbx_1/suspend-1", dir, files)
	if err != nil {
		t.Fatal(err)
	}
	// About 4 MiB of random data and a compressible page run: the 1 GiB
	// memory file and 64 MiB disk must not balloon the upload.
	if stored := m.StoredBytes(); stored > 8*mib {
		t.Errorf("stored %d bytes for %d bytes of files; want < 8 MiB", stored, m.Size())
	}
	if got := m.Size(); got != gib+200*1024+3+64*mib+12345+11 {
		t.Errorf("manifest size %d", got)
	}
	keys := bucketKeys(t, srv, s, "chunks/")
	var want int
	for _, f := range m.Files {
		want += len(f.Chunks)
	}
	if len(keys) != want {
		t.Errorf("%d chunk objects in the bucket, manifest lists %d", len(keys), want)
	}
	t.Logf("1 GiB memory + 64 MiB disk: %d chunks, %d bytes stored (%d data bytes)", want, m.StoredBytes(), m.DataBytes())

	if names, err := s.ListSnapshots(ctx, "sbx_1/"); err != nil || !slices.Equal(names, []string{"sbx_1/suspend-1"}) {
		t.Fatalf("ListSnapshots = %v, %v", names, err)
	}
	if _, err := s.PutSnapshot(ctx, "sbx_1/suspend-1", dir, files); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("second put of one name: %v, want conflict", err)
	}

	out := filepath.Join(t.TempDir(), "restore")
	got, err := s.GetSnapshot(ctx, "sbx_1/suspend-1", out)
	if err != nil {
		t.Fatal(err)
	}
	if got.Upload != m.Upload {
		t.Errorf("downloaded upload %s, stored %s", got.Upload, m.Upload)
	}
	for _, f := range files {
		if a, b := fileSum(t, filepath.Join(dir, f)), fileSum(t, filepath.Join(out, f)); a != b {
			t.Errorf("%s: downloaded sha256 %s, original %s", f, b, a)
		}
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Mode().Perm() != 0o640 {
			t.Errorf("%s: mode %v, %v; want 0640", f, fi.Mode(), err)
		}
	}
	if a := allocated(t, filepath.Join(out, "memory")); a > 16*mib {
		t.Errorf("downloaded memory file takes %d bytes of disk: its holes were filled", a)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(out, ".*part*")); len(leftovers) != 0 {
		t.Errorf("temporaries left: %v", leftovers)
	}

	if err := s.DeleteSnapshot(ctx, "sbx_1/suspend-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StatSnapshot(ctx, "sbx_1/suspend-1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("stat after delete: %v", err)
	}
	if err := s.DeleteSnapshot(ctx, "sbx_1/suspend-1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if keys := bucketKeys(t, srv, s, ""); len(keys) != 0 {
		t.Errorf("after delete the bucket still holds %v", keys)
	}
}

func TestImagesArePutOnce(t *testing.T) {
	srv := sharedServer(t)
	s := openStore(t, srv, objstore.Options{})
	ctx := testCtx(t)
	dir := t.TempDir()
	writeAt(t, filepath.Join(dir, "rootfs.ext4"), 32*mib, map[int64][]byte{4096: randBytes(2 * mib)})
	digest := "sha256:" + strings.Repeat("ab", 32)

	first, err := s.PutImage(ctx, digest, dir, []string{"rootfs.ext4"})
	if err != nil {
		t.Fatal(err)
	}
	chunks := len(bucketKeys(t, srv, s, "chunks/"))
	again, err := s.PutImage(ctx, digest, dir, []string{"rootfs.ext4"})
	if err != nil || again.Upload != first.Upload {
		t.Fatalf("second PutImage = %v, %v; want the first manifest back", again, err)
	}
	if n := len(bucketKeys(t, srv, s, "chunks/")); n != chunks {
		t.Errorf("second PutImage stored chunks: %d, was %d", n, chunks)
	}
	out := t.TempDir()
	if _, err := s.GetImage(ctx, digest, out); err != nil {
		t.Fatal(err)
	}
	if fileSum(t, filepath.Join(dir, "rootfs.ext4")) != fileSum(t, filepath.Join(out, "rootfs.ext4")) {
		t.Error("image bytes differ")
	}
	if list, err := s.ListImages(ctx); err != nil || !slices.Equal(list, []string{digest}) {
		t.Errorf("ListImages = %v, %v", list, err)
	}
	if _, err := s.PutImage(ctx, "latest", dir, []string{"rootfs.ext4"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("PutImage by a tag: %v, want invalid_argument", err)
	}
}

func TestBadNamesAndFiles(t *testing.T) {
	srv := sharedServer(t)
	s := openStore(t, srv, objstore.Options{})
	ctx := testCtx(t)
	dir := t.TempDir()
	writeAt(t, filepath.Join(dir, "a"), 10, nil)
	for _, tc := range []struct {
		name  string
		files []string
		class *errdefs.Class
	}{
		{"../escape", []string{"a"}, errdefs.ErrInvalidArgument},
		{"a//b", []string{"a"}, errdefs.ErrInvalidArgument},
		{"with space", []string{"a"}, errdefs.ErrInvalidArgument},
		{"ok", nil, errdefs.ErrInvalidArgument},
		{"ok", []string{"../a"}, errdefs.ErrInvalidArgument},
		{"ok", []string{"/etc/passwd"}, errdefs.ErrInvalidArgument},
		{"ok", []string{"a", "a"}, errdefs.ErrInvalidArgument},
		{"ok", []string{"missing"}, errdefs.ErrNotFound},
	} {
		if _, err := s.PutSnapshot(ctx, tc.name, dir, tc.files); errdefs.ClassOf(err) != tc.class {
			t.Errorf("PutSnapshot(%q, %v) = %v, want %s", tc.name, tc.files, err, tc.class.Code())
		}
	}
	if names, err := s.ListSnapshots(ctx, ""); err != nil || len(names) != 0 {
		t.Errorf("after refused puts: %v, %v", names, err)
	}
}

// TestDamageIsDataLoss damages a stored snapshot in the bucket in each way
// a store can lose data and expects data_loss, with nothing left in the
// download dir.
func TestDamageIsDataLoss(t *testing.T) {
	srv := sharedServer(t)
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	zenc, _ := zstd.NewWriter(nil)
	defer zenc.Close()
	put := func(key string, data []byte) {
		if _, err := client.PutObject(ctx, srv.Bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		damage func(s *objstore.Store, m *objstore.Manifest, key string)
	}{
		{"other bytes, same length", func(s *objstore.Store, m *objstore.Manifest, key string) {
			put(key, zenc.EncodeAll(randBytes(int(m.ChunkSize)), nil)[:m.Files[0].Chunks[1].Stored])
		}},
		{"valid zstd of other data", func(s *objstore.Store, m *objstore.Manifest, key string) {
			other := randBytes(int(m.ChunkSize))
			other[0] ^= 1
			put(key, zenc.EncodeAll(other, nil))
		}},
		{"truncated", func(s *objstore.Store, m *objstore.Manifest, key string) {
			obj, _ := client.GetObject(ctx, srv.Bucket, key, minio.GetObjectOptions{})
			var b bytes.Buffer
			b.ReadFrom(obj)
			put(key, b.Bytes()[:b.Len()/2])
		}},
		{"missing chunk", func(s *objstore.Store, m *objstore.Manifest, key string) {
			if err := client.RemoveObject(ctx, srv.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{"manifest edited", func(s *objstore.Store, m *objstore.Manifest, key string) {
			obj, _ := client.GetObject(ctx, srv.Bucket, s.ManifestKey("snap"), minio.GetObjectOptions{})
			var b bytes.Buffer
			b.ReadFrom(obj)
			put(s.ManifestKey("snap"), bytes.Replace(b.Bytes(), []byte(`"index":1,`), []byte(`"index":2,`), 1))
		}},
		{"manifest garbage", func(s *objstore.Store, m *objstore.Manifest, key string) {
			put(s.ManifestKey("snap"), []byte("{not json"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, srv, objstore.Options{ChunkSize: mib})
			dir := t.TempDir()
			writeAt(t, filepath.Join(dir, "memory"), 6*mib, map[int64][]byte{0: randBytes(4 * mib)})
			m, err := s.PutSnapshot(ctx, "snap", dir, []string{"memory"})
			if err != nil {
				t.Fatal(err)
			}
			tc.damage(s, m, s.ChunkKey(m, 0, 1))
			out := t.TempDir()
			if _, err := s.GetSnapshot(ctx, "snap", out); !errors.Is(err, errdefs.ErrDataLoss) {
				t.Fatalf("GetSnapshot of a damaged snapshot: %v, want data_loss", err)
			}
			if left, _ := os.ReadDir(out); len(left) != 0 {
				t.Errorf("a failed download left %v", left)
			}
			// A damaged snapshot can still be deleted, and then GC has nothing
			// to keep: the bucket ends empty.
			if err := s.DeleteSnapshot(ctx, "snap"); err != nil {
				t.Fatalf("delete a damaged snapshot: %v", err)
			}
			if _, err := s.GC(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if keys := bucketKeys(t, srv, s, ""); len(keys) != 0 {
				t.Errorf("left in the bucket: %v", keys)
			}
		})
	}
}

func TestGetMissingIsNotFound(t *testing.T) {
	s := openStore(t, sharedServer(t), objstore.Options{})
	if _, err := s.GetSnapshot(testCtx(t), "never", t.TempDir()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSnapshot(never) = %v, want not_found", err)
	}
}
