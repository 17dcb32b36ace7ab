package main

import (
	"archive/tar"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/space-sandbox/space/internal/guest"
)

// testOptions builds into a temporary directory with the real root cache
// (CI's first run makes the roots; later runs reuse them).
func testOptions(t *testing.T) options {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("building images needs root (mmdebstrap --mode=root); CI runs as root")
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Fatal("mmdebstrap missing: run `make setup`")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	tag, err := chartAppVersion(goBin)
	if err != nil {
		t.Fatal(err)
	}
	return options{
		out: t.TempDir(), registry: "localhost", tag: tag, cacheDir: "/var/cache/space/images",
		kernelDir: guest.KernelDirFromEnv(), suite: "bookworm", goBin: goBin,
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// TestImages builds both images twice (same digests), then reads each
// archive back both ways a runtime does — as a docker-archive and as an OCI
// layout — and checks the config and the files the component needs.
func TestImages(t *testing.T) {
	o := testOptions(t)
	first, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	o2 := o
	o2.out = t.TempDir()
	second, err := build(o2)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 || len(second) != 2 {
		t.Fatalf("built %d and %d images, want 2", len(first), len(second))
	}
	for i := range first {
		t.Logf("%s %s@%s", first[i].Name, first[i].Ref, first[i].Digest)
		if first[i].Digest != second[i].Digest {
			t.Errorf("%s: digest %s, then %s from the same inputs", first[i].Name, first[i].Digest, second[i].Digest)
		}
	}
	kernel, err := guest.Locate(o.kernelDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range first {
		t.Run(r.Name, func(t *testing.T) {
			img := readArchive(t, r)
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			files := listFiles(t, img)
			var want []string
			switch r.Name {
			case "control":
				if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/usr/bin/spaced"}) || !slices.Equal(cf.Config.Cmd, []string{"control"}) {
					t.Errorf("config user %q entrypoint %q cmd %q", cf.Config.User, cf.Config.Entrypoint, cf.Config.Cmd)
				}
				want = []string{"usr/bin/spaced", "usr/bin/space", "etc/ssl/certs/ca-certificates.crt", "home/nonroot/"}
				if h := files["home/nonroot/"]; h != nil && (h.Uid != 65532 || h.Gid != 65532) {
					t.Errorf("home/nonroot owned by %d:%d", h.Uid, h.Gid)
				}
			case "worker":
				if cf.Config.User != "0:0" || !slices.Equal(cf.Config.Cmd, []string{"worker"}) || !slices.Contains(cf.Config.Env, "SPACE_KERNEL_DIR="+kernelDir) {
					t.Errorf("config user %q cmd %q env %q", cf.Config.User, cf.Config.Cmd, cf.Config.Env)
				}
				kdir := strings.TrimPrefix(kernelDir, "/") + "/" + kernel.Version
				want = []string{"usr/bin/spaced", "usr/bin/space-agent", "usr/bin/qemu-system-x86_64", "usr/bin/qemu-img",
					"usr/share/seabios/bios-microvm.bin", "sbin/mkfs.btrfs", "sbin/mkfs.ext4", "usr/sbin/nft", "bin/ip", "usr/bin/mmdebstrap",
					"sbin/losetup", "usr/bin/unshare", "bin/busybox", "bin/bash-static",
					kdir + "/vmlinuz", kdir + "/lib/modules/" + kernel.Version + "/kernel/"}
			}
			for _, w := range want {
				if files[w] == nil && files["usr/"+w] == nil {
					t.Errorf("%s is not in the image", w)
				}
			}
			for _, b := range []string{"usr/bin/spaced", "usr/bin/space", "usr/bin/space-agent"} {
				if h := files[b]; h != nil && (h.Mode&0o111 == 0 || h.Uid != 0) {
					t.Errorf("%s: mode %o uid %d", b, h.Mode, h.Uid)
				}
			}
			if cf.Architecture != "amd64" || cf.OS != "linux" || !cf.Created.Time.Equal(epoch) {
				t.Errorf("arch %s os %s created %v", cf.Architecture, cf.OS, cf.Created)
			}
		})
	}
}

// readArchive opens an archive as a docker-archive (what crane push and
// kind read) and as an OCI layout (what ctr import reads); both must be the
// image whose digest the builder printed.
func readArchive(t *testing.T, r result) v1.Image {
	t.Helper()
	img, err := tarball.ImageFromPath(r.Archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := img.Digest(); err != nil || d.String() != r.Digest {
		t.Errorf("docker-archive digest %s (%v), printed %s", d, err, r.Digest)
	}
	dir := t.TempDir()
	untar(t, r.Archive, dir)
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Digest.String() != r.Digest || im.Manifests[0].Annotations["io.containerd.image.name"] != r.Ref {
		b, _ := json.Marshal(im)
		t.Fatalf("OCI index %s, want one manifest %s named %s", b, r.Digest, r.Ref)
	}
	oimg, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := oimg.Layers()
	if err != nil || len(layers) == 0 {
		t.Fatalf("OCI layout layers: %d, %v", len(layers), err)
	}
	return img
}

// listFiles flattens the image's layers into its file table.
func listFiles(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if h.Typeflag == tar.TypeDir && !strings.HasSuffix(name, "/") {
			name += "/"
		}
		out[name] = h
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		w, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, tr); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
}

// TestWorkerToolsRun runs, chrooted into the flattened worker image, the
// tools the worker calls: their shared libraries and data files are all in
// the image.
func TestWorkerToolsRun(t *testing.T) {
	o := testOptions(t)
	o.only = []string{"worker"}
	results, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(results[0].Archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	extract(t, img, root)
	for _, argv := range [][]string{
		{"/usr/bin/qemu-system-x86_64", "-version"}, {"/usr/bin/qemu-img", "--version"},
		{"/sbin/mkfs.btrfs", "--version"}, {"/sbin/mkfs.ext4", "-V"}, {"/usr/sbin/nft", "--version"},
		{"/bin/ip", "-V"}, {"/usr/bin/mmdebstrap", "--version"}, {"/sbin/losetup", "--version"},
		{"/usr/bin/space-agent", "-h"},
	} {
		out, err := exec.Command("chroot", append([]string{root}, argv...)...).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "sage") {
			t.Errorf("%q in the worker image: %v\n%s", argv, err, out)
		}
	}
	out, _ := exec.Command("chroot", root, "/usr/bin/spaced", "-h").CombinedOutput()
	if !strings.Contains(string(out), "-data-dir") {
		t.Errorf("spaced -h in the worker image:\n%s", out)
	}
}

// extract writes the image's flattened file system under root.
func extract(t *testing.T, img v1.Image, root string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeLink:
			err = os.Link(filepath.Join(root, filepath.Clean("/"+h.Linkname)), p)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o777)); err == nil {
				_, err = io.Copy(f, tr)
				f.Close()
			}
		}
		if err != nil && !os.IsExist(err) {
			t.Fatalf("extract %s: %v", h.Name, err)
		}
	}
}
