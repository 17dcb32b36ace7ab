package storage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

// requireLoop skips unless this host can loop-mount a btrfs image.
func requireLoop(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (loop-mounting a btrfs image)")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("needs loop devices (/dev/loop-control)")
	}
	for _, tool := range []string{"mkfs.btrfs", "mount", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
}

// openLoop opens a Store in a fresh temp dir on a filesystem without
// reflinks, so the loop path runs; cleanup unmounts and checks that no loop
// device is left on the image.
func openLoop(t testing.TB) *Store {
	t.Helper()
	requireLoop(t)
	dir := t.TempDir()
	if probeReflink(dir) == nil {
		t.Skipf("temp dir %s reflinks natively; the loop path needs one that does not", dir)
	}
	s, err := Open(context.Background(), Config{DataDir: dir, ImageSizeGiB: MinImageGiB}, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Unmount(context.Background()); err != nil {
			t.Errorf("Unmount: %v", err)
		}
		awaitNoLoop(t, s.Image())
	})
	return s
}

// awaitNoLoop waits (bounded) until no loop device is backed by image: the
// kernel may release an autoclear loop device just after umount returns.
func awaitNoLoop(t testing.TB, image string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		devs := loopDevicesOf(t, image)
		if len(devs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("loop devices still attached to %s: %v", image, devs)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func loopDevicesOf(t testing.TB, image string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var devs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == image {
			devs = append(devs, strings.Split(f, "/")[3])
		}
	}
	return devs
}

func TestOpenLoopMountReuseRemount(t *testing.T) {
	s := openLoop(t)
	ctx := context.Background()
	dir := filepath.Dir(s.Root())
	if s.Root() != filepath.Join(dir, VolName) || s.Image() != filepath.Join(dir, ImageName) {
		t.Fatalf("Root, Image = %s, %s", s.Root(), s.Image())
	}
	if devs := loopDevicesOf(t, s.Image()); len(devs) != 1 {
		t.Fatalf("loop devices on image = %v, want one", devs)
	}
	marker := filepath.Join(s.Root(), "marker")
	if err := os.WriteFile(marker, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}

	// A second Open (a restarted worker) reuses the mount.
	s2, err := Open(ctx, Config{DataDir: dir}, nil)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if s2.Root() != s.Root() {
		t.Errorf("reopen root %s, want %s", s2.Root(), s.Root())
	}
	if devs := loopDevicesOf(t, s.Image()); len(devs) != 1 {
		t.Errorf("reopen attached another loop device: %v", devs)
	}

	// After an unmount (as after a reboot) Open mounts the same image again.
	if err := s.Unmount(ctx); err != nil {
		t.Fatal(err)
	}
	awaitNoLoop(t, s.Image())
	s3, err := Open(ctx, Config{DataDir: dir}, nil)
	if err != nil {
		t.Fatalf("remount: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(s3.Root(), "marker")); err != nil || string(b) != "kept" {
		t.Errorf("marker after remount = %q, %v", b, err)
	}
}

func TestCloneIndependence(t *testing.T) {
	s := openLoop(t)
	ctx := context.Background()
	src := filepath.Join(s.Root(), "src.img")
	orig := bytes.Repeat([]byte("template-block-"), 100000)
	if err := os.WriteFile(src, orig, 0o640); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(s.Root(), "dst.img")
	if err := s.Clone(ctx, src, dst); err != nil {
		t.Fatalf("Clone: %v", err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, orig) {
		t.Fatalf("clone content differs (err %v)", err)
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o640 {
		t.Errorf("clone mode %v, want 0640", fi.Mode().Perm())
	}
	f, err := os.OpenFile(dst, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("SANDBOX WROTE HERE"), 4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if now, _ := os.ReadFile(src); !bytes.Equal(now, orig) {
		t.Error("writing the clone changed the source")
	}
	if now, _ := os.ReadFile(dst); bytes.Equal(now, orig) {
		t.Error("write to the clone did not land")
	}

	tests := []struct {
		name     string
		src, dst string
		want     *errdefs.Class
	}{
		{"target exists", src, dst, errdefs.ErrConflict},
		{"missing source", filepath.Join(s.Root(), "nope"), filepath.Join(s.Root(), "x"), errdefs.ErrNotFound},
		{"across filesystems", src, filepath.Join(t.TempDir(), "ext4-copy"), errdefs.ErrFailedPrecondition},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Clone(ctx, tc.src, tc.dst)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Clone = %v, want %s", err, tc.want.Code())
			}
			if tc.want != errdefs.ErrConflict {
				if _, err := os.Stat(tc.dst); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("failed clone left %s behind", tc.dst)
				}
			}
		})
	}
}

func TestCloneAndGrow(t *testing.T) {
	s := openLoop(t)
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("needs mkfs.ext4 (e2fsprogs)")
	}
	ctx := context.Background()
	src := filepath.Join(s.Root(), "template.ext4")
	if err := os.WriteFile(src, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(src, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", src).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v %s", err, out)
	}
	dst := filepath.Join(s.Root(), "sandbox.ext4")
	if err := s.CloneAndGrow(ctx, src, dst, 256<<20); err != nil {
		t.Fatalf("CloneAndGrow: %v", err)
	}
	if fi, _ := os.Stat(dst); fi.Size() != 256<<20 {
		t.Errorf("size %d, want %d", fi.Size(), 256<<20)
	}
	if got := ext4Bytes(t, dst); got != 256<<20 {
		t.Errorf("ext4 size %d, want %d", got, 256<<20)
	}
	if got := ext4Bytes(t, src); got != 64<<20 {
		t.Errorf("source ext4 size changed to %d", got)
	}
	// Not growing is a plain clone.
	same := filepath.Join(s.Root(), "same.ext4")
	if err := s.CloneAndGrow(ctx, src, same, 0); err != nil {
		t.Fatalf("CloneAndGrow(0): %v", err)
	}
	if fi, _ := os.Stat(same); fi.Size() != 64<<20 {
		t.Errorf("size %d, want %d", fi.Size(), 64<<20)
	}
}

// ext4Bytes reads the filesystem size from the superblock.
func ext4Bytes(t *testing.T, path string) int64 {
	t.Helper()
	out, err := exec.Command("dumpe2fs", "-h", path).Output()
	if err != nil {
		t.Fatalf("dumpe2fs: %v", err)
	}
	var count, size int64
	for _, line := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch strings.TrimSpace(k) {
		case "Block count":
			count, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		case "Block size":
			size, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return count * size
}

func TestEnsureFree(t *testing.T) {
	s := openLoop(t)
	ctx := context.Background()
	if err := s.EnsureFree(ctx, 1<<20); err != nil {
		t.Fatalf("EnsureFree(1 MiB): %v", err)
	}
	err := s.EnsureFree(ctx, 1<<50)
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("EnsureFree(1 PiB) = %v, want resource_exhausted", err)
	}
	var pub *errdefs.Public
	if !errors.As(err, &pub) || strings.Contains(pub.Error(), s.Root()) {
		t.Errorf("error %q is not a tenant-safe public error", err)
	}
}

func TestNativeReflinkDirIsUsedAsIs(t *testing.T) {
	s := openLoop(t)
	// The mounted btrfs volume reflinks: a data dir inside it needs no image.
	dir := filepath.Join(s.Root(), "nested")
	s2, err := Open(context.Background(), Config{DataDir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Root() != dir || s2.Image() != "" {
		t.Errorf("Root, Image = %s, %q; want %s, \"\"", s2.Root(), s2.Image(), dir)
	}
}
