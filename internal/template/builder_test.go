package template

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/space-sandbox/space/internal/errdefs"
)

func runOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// testImage is two layers: the second whites out a file, makes a
// directory opaque and adds files; the config carries run settings.
func testImage(t testing.TB, extra ...v1.Layer) v1.Image {
	l1 := layerOf(t,
		dir("bin/"), file("bin/sh", "#!stand-in shell\n"),
		dir("etc/"), file("etc/keep", "kept\n"), file("etc/gone", "whited out\n"),
		dir("opt/"), dir("opt/dir/"), file("opt/dir/old", "lower\n"), dir("opt/dir/sub/"), file("opt/dir/sub/deep", "lower\n"),
		symlink("etc/link", "/etc/keep"),
	)
	l2 := layerOf(t,
		file("etc/.wh.gone", ""),
		file("opt/dir/new", "upper\n"), // before the marker: still kept
		file("opt/dir/.wh..wh..opq", ""),
		dir("usr/"), dir("usr/local/"), dir("usr/local/bin/"),
		ent{name: "usr/local/bin/hello", body: "#!/bin/sh\necho hello\n", mode: 0o4755, uid: 1000},
		hardlink("etc/keep2", "etc/keep"),
	)
	conf := v1.Config{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "FOO=bar=baz"}, WorkingDir: "/work", User: "1000",
		Entrypoint: []string{"/usr/local/bin/hello"}, Cmd: []string{"--loud"}}
	return imageOf(t, "amd64", conf, append([]v1.Layer{l1, l2}, extra...)...)
}

func checkTestImage(t *testing.T, m Metadata) {
	t.Helper()
	if out, err := runOut("e2fsck", "-fn", m.Image); err != nil {
		t.Fatalf("e2fsck: %v\n%s", err, out)
	}
	for path, want := range map[string]bool{
		"/etc/keep": true, "/etc/keep2": true, "/etc/link": true, "/etc/gone": false, "/etc/.wh.gone": false,
		"/opt/dir/new": true, "/opt/dir/old": false, "/opt/dir/sub": false, "/opt/dir/.wh..wh..opq": false,
		"/usr/local/bin/hello": true, AgentPath: true, "/proc": true, "/sys": true, "/dev": true, "/run": true, "/tmp": true,
	} {
		if got := exists(t, m.Image, path); got != want {
			t.Errorf("%s exists = %v, want %v", path, got, want)
		}
	}
	if st := debugfsAny(t, m.Image, "stat /usr/local/bin/hello"); !strings.Contains(st, "Mode:  04755") || !strings.Contains(st, "User:  1000") {
		t.Errorf("hello lost its owner or setuid bit:\n%s", st)
	}
	if st := debugfsAny(t, m.Image, "stat /tmp"); !strings.Contains(st, "Mode:  01777") {
		t.Errorf("/tmp mode:\n%s", st)
	}
	d := m.Defaults
	if d.Env["FOO"] != "bar=baz" || d.Env["PATH"] != "/usr/local/bin:/usr/bin:/bin" || d.Workdir != "/work" || d.User != "1000" {
		t.Errorf("defaults from the image config = %+v", d)
	}
	if m.ImageConfig == nil || m.ImageConfig.Cmd[0] != "--loud" || m.ImageConfig.Entrypoint[0] != "/usr/local/bin/hello" {
		t.Errorf("image config = %+v", m.ImageConfig)
	}
	if d.DiskMiB*mib < int(m.SizeBytes) || m.ContentBytes <= 0 || m.ContentBytes >= m.SizeBytes {
		t.Errorf("sizes: image %d, content %d, disk_mib %d", m.SizeBytes, m.ContentBytes, d.DiskMiB)
	}
}

func TestBuildOCILayout(t *testing.T) {
	needBuildHost(t)
	ctx := context.Background()
	b, templates := newTestBuilder(t, nil)
	src := Source{Type: SourceOCI, Path: writeLayout(t, testImage(t))}
	var logBuf bytes.Buffer
	var prog progressLog
	m, err := b.Build(ctx, BuildRequest{Name: "app", Source: src, Defaults: Defaults{Env: map[string]string{"EXTRA": "1"}}}, prog.fn, &logBuf)
	if err != nil {
		t.Fatal(err)
	}
	checkTestImage(t, m)
	if m.Defaults.Env["EXTRA"] != "1" {
		t.Errorf("request env lost: %+v", m.Defaults.Env)
	}
	if !prog.has("extract layer 2 of 2") || !prog.has("done") || strings.Contains(logBuf.String(), templates) {
		t.Errorf("progress %v; log:\n%s", prog.steps, logBuf.String())
	}
	if d, err := imageDigest(ctx, m.Image, m.Defaults); err != nil || d != m.Digest {
		t.Errorf("digest %s does not cover image and defaults (recomputed %s, %v)", m.Digest, d, err)
	}

	// Unchanged: a cache hit, the same build.
	prog = progressLog{}
	again, err := b.Build(ctx, BuildRequest{Name: "app", Source: src, Defaults: Defaults{Env: map[string]string{"EXTRA": "1"}}}, prog.fn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != m.Digest || !again.CreatedAt.Equal(m.CreatedAt) || inode(t, again.Image) != inode(t, m.Image) || !prog.has("cached") {
		t.Errorf("unchanged rebuild was not a cache hit: %+v, steps %v", again, prog.steps)
	}

	// Changed: a new build becomes `app`; the old one stays pinned.
	src2 := Source{Type: SourceOCI, Path: writeLayout(t, testImage(t, layerOf(t, file("etc/v2", "2\n"))))}
	m2, err := b.Build(ctx, BuildRequest{Name: "app", Source: src2}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m2.Digest == m.Digest || !exists(t, m2.Image, "/etc/v2") {
		t.Fatalf("rebuild from a changed image: %+v", m2)
	}
	if cur, err := Load(templates, "app"); err != nil || cur.Digest != m2.Digest {
		t.Errorf("Load(app) = %s, %v; want %s", cur.Digest, err, m2.Digest)
	}
	if old, err := Load(templates, m.Ref()); err != nil || old.Digest != m.Digest || exists(t, old.Image, "/etc/v2") {
		t.Errorf("Load(%s) = %+v, %v", m.Ref(), old, err)
	}
	if builds, err := List(templates, "app"); err != nil || len(builds) != 2 || builds[0].Digest != m2.Digest {
		t.Errorf("List = %d builds, %v", len(builds), err)
	}
	// Rebuilding the first source again makes it current without work.
	if back, err := b.Build(ctx, BuildRequest{Name: "app", Source: src, Defaults: Defaults{Env: map[string]string{"EXTRA": "1"}}}, nil, nil); err != nil || back.Digest != m.Digest {
		t.Fatalf("rebuild of the first source = %s, %v", back.Digest, err)
	}
	if cur, _ := Load(templates, "app"); cur.Digest != m.Digest {
		t.Errorf("after rebuilding the first source Load(app) = %s, want %s", cur.Digest, m.Digest)
	}

	// Delete one build, then the name.
	if err := b.Delete(ctx, m.Ref()); err != nil {
		t.Fatal(err)
	}
	if cur, err := Load(templates, "app"); err != nil || cur.Digest != m2.Digest {
		t.Errorf("after deleting %s Load(app) = %s, %v", m.Ref(), cur.Digest, err)
	}
	if _, err := Load(templates, m.Ref()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("deleted build loads: %v", err)
	}
	if err := b.Delete(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(templates, "app"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("deleted template loads: %v", err)
	}
	if err := b.Delete(ctx, "app"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second delete: %v, want not_found", err)
	}
	assertNoScratch(t, templates)
}

func TestBuildOCIArchives(t *testing.T) {
	needBuildHost(t)
	ctx := context.Background()
	img := testImage(t)
	docker := filepath.Join(t.TempDir(), "image.tar")
	if err := tarball.WriteToFile(docker, name.MustParseReference("example.com/app:1"), img); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ kind, path string }{
		{"docker save tar", docker},
		{"OCI archive tar", tarDir(t, writeLayout(t, img))},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			b, templates := newTestBuilder(t, nil)
			m, err := b.Build(ctx, BuildRequest{Name: "app", Source: Source{Type: SourceOCI, Path: tc.path}}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkTestImage(t, m)
			if !strings.HasPrefix(m.SourceDigest, "sha256:") {
				t.Errorf("source digest %q", m.SourceDigest)
			}
			assertNoScratch(t, templates)
		})
	}
}

func TestBuildRegistry(t *testing.T) {
	needBuildHost(t)
	ctx := context.Background()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/space/app:1"
	img := testImage(t)
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	// A registry on loopback is refused unless the operator allows it.
	b, _ := newTestBuilder(t, func(c *BuilderConfig) { c.RegistryAllow = []string{strings.TrimPrefix(srv.URL, "http://")} })
	m, err := b.Build(ctx, BuildRequest{Name: "pulled", Source: Source{Type: SourceOCI, Image: ref}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkTestImage(t, m)
	if want, _ := img.Digest(); m.SourceDigest != want.String() {
		t.Errorf("source digest %s, want the manifest digest %s", m.SourceDigest, want)
	}
	missing := strings.TrimPrefix(srv.URL, "http://") + "/space/none:1"
	if _, err := b.Build(ctx, BuildRequest{Name: "pulled", Source: Source{Type: SourceOCI, Image: missing}}, nil, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("missing image: %v, want invalid_argument", err)
	}
}

func TestBuildRootfs(t *testing.T) {
	needBuildHost(t)
	ctx := context.Background()
	tarball := writeFile(t, "rootfs.tar.gz", gzipOf(t, tarOf(t,
		dir("etc/"), file("etc/os-release", "ID=test\n"), dir("usr/"), dir("usr/bin/"), symlink("bin", "usr/bin"),
		file("usr/bin/tool", "tool\n"),
	)))
	srcDir := t.TempDir()
	os.MkdirAll(filepath.Join(srcDir, "etc"), 0o755)
	os.WriteFile(filepath.Join(srcDir, "etc", "os-release"), []byte("ID=dir\n"), 0o644)
	os.Symlink("/etc/os-release", filepath.Join(srcDir, "os-release-link"))
	os.Link(filepath.Join(srcDir, "etc", "os-release"), filepath.Join(srcDir, "etc", "hard"))

	for _, tc := range []struct{ kind, path, want string }{{"tar.gz", tarball, "ID=test"}, {"directory", srcDir, "ID=dir"}} {
		t.Run(tc.kind, func(t *testing.T) {
			b, templates := newTestBuilder(t, nil)
			m, err := b.Build(ctx, BuildRequest{Name: "fs", Source: Source{Type: SourceRootfs, Path: tc.path}}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := debugfsAny(t, m.Image, "cat /etc/os-release"); !strings.Contains(got, tc.want) {
				t.Errorf("os-release = %q", got)
			}
			// No /bin/sh in the source: busybox's is added, and said so.
			if !exists(t, m.Image, "/usr/local/lib/space/busybox") || len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "/bin/sh") {
				t.Errorf("missing /bin/sh not handled: warnings %v", m.Warnings)
			}
			if tc.kind == "tar.gz" && !strings.Contains(debugfsAny(t, m.Image, "stat /usr/bin/sh"), "symlink") {
				t.Errorf("/bin/sh was not linked through the image's /bin -> usr/bin")
			}
			if tc.kind == "directory" && !strings.Contains(debugfsAny(t, m.Image, "stat /etc/hard"), "Links: 2") {
				t.Errorf("hard link lost: %s", debugfsAny(t, m.Image, "stat /etc/hard"))
			}
			again, err := b.Build(ctx, BuildRequest{Name: "fs", Source: Source{Type: SourceRootfs, Path: tc.path}}, nil, nil)
			if err != nil || again.Digest != m.Digest || !again.CreatedAt.Equal(m.CreatedAt) {
				t.Errorf("unchanged rootfs rebuilt: %v", err)
			}
			assertNoScratch(t, templates)
		})
	}
}
