package template

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/space-sandbox/space/internal/errdefs"
)

func TestBuildBadSources(t *testing.T) {
	needBuildHost(t)
	ctx := context.Background()
	notTar := writeFile(t, "notes.txt", []byte("just some text, long enough to not be a tar header at all\n"))
	plainTar := writeFile(t, "plain.tar", tarOf(t, file("hello", "hi\n")))
	emptyDir := t.TempDir()
	armLayout := writeLayout(t, imageOf(t, "arm64", v1.Config{}, layerOf(t, file("bin/sh", "x"))))
	big := writeLayout(t, imageOf(t, "amd64", v1.Config{}, layerOf(t, file("big", strings.Repeat("x", 2<<20)))))
	escaping := writeLayout(t, imageOf(t, "amd64", v1.Config{}, layerOf(t, file("../escape", "x"))))
	outside := t.TempDir()

	for _, tc := range []struct {
		name  string
		req   BuildRequest
		class *errdefs.Class
		msg   string
	}{
		{"bad name", BuildRequest{Name: "Bad_Name", Source: Source{Type: SourceOCI, Path: emptyDir}}, errdefs.ErrInvalidArgument, "name"},
		{"name too long", BuildRequest{Name: strings.Repeat("a", 64), Source: Source{Type: SourceOCI, Path: emptyDir}}, errdefs.ErrInvalidArgument, "name"},
		{"reserved name", BuildRequest{Name: BaseName, Source: Source{Type: SourceOCI, Path: emptyDir}}, errdefs.ErrInvalidArgument, "reserved"},
		{"no type", BuildRequest{Name: "x", Source: Source{Path: emptyDir}}, errdefs.ErrInvalidArgument, "source.type"},
		{"unknown type", BuildRequest{Name: "x", Source: Source{Type: "zip", Path: emptyDir}}, errdefs.ErrInvalidArgument, "zip"},
		{"missing path", BuildRequest{Name: "x", Source: Source{Type: SourceOCI, Path: "/nonexistent/image"}}, errdefs.ErrInvalidArgument, `"/nonexistent/image" does not exist`},
		{"relative path", BuildRequest{Name: "x", Source: Source{Type: SourceRootfs, Path: "rel/dir"}}, errdefs.ErrInvalidArgument, "absolute"},
		{"oci: not a layout", BuildRequest{Name: "x", Source: Source{Type: SourceOCI, Path: emptyDir}}, errdefs.ErrInvalidArgument, "not an OCI image layout"},
		{"oci: not a tar", BuildRequest{Name: "x", Source: Source{Type: SourceOCI, Path: notTar}}, errdefs.ErrInvalidArgument, "not an image tar"},
		{"oci: plain tar", BuildRequest{Name: "x", Source: Source{Type: SourceOCI, Path: plainTar}}, errdefs.ErrInvalidArgument, "not an image archive"},
		{"oci: wrong arch", BuildRequest{Name: "x", Source: Source{Type: SourceOCI, Path: armLayout}}, errdefs.ErrInvalidArgument, "linux/arm64"},
		{"oci: path and image", BuildRequest{Name: "x", Source: Source{Type: SourceOCI, Path: armLayout, Image: "debian"}}, errdefs.ErrInvalidArgument, "not both"},
		{"oci: bad reference", BuildRequest{Name: "x", Source: Source{Type: SourceOCI, Image: "UPPER/Case::x"}}, errdefs.ErrInvalidArgument, "invalid"},
		{"oci: too big", BuildRequest{Name: "x", Source: Source{Type: SourceOCI, Path: big}}, errdefs.ErrInvalidArgument, "size limit"},
		{"oci: escaping entry", BuildRequest{Name: "x", Source: Source{Type: SourceOCI, Path: escaping}}, errdefs.ErrInvalidArgument, "outside the image"},
		{"rootfs: not a tar", BuildRequest{Name: "x", Source: Source{Type: SourceRootfs, Path: notTar}}, errdefs.ErrInvalidArgument, "not a tar archive"},
		{"rootfs: outside roots", BuildRequest{Name: "x", Source: Source{Type: SourceRootfs, Path: outside}}, errdefs.ErrPermissionDenied, "outside the directories"},
		{"debian: bad suite", BuildRequest{Name: "x", Source: Source{Type: SourceDebian, Suite: "Book worm"}}, errdefs.ErrInvalidArgument, "suite"},
		{"debian: bad package", BuildRequest{Name: "x", Source: Source{Type: SourceDebian, Suite: "bookworm", Packages: []string{"--allow-unauthenticated"}}}, errdefs.ErrInvalidArgument, "package name"},
		{"debian: script not allowed", BuildRequest{Name: "x", Source: Source{Type: SourceDebian, Suite: "bookworm", Script: "true"}}, errdefs.ErrPermissionDenied, "not allowed"},
		{"debian: bad variant", BuildRequest{Name: "x", Source: Source{Type: SourceDebian, Suite: "bookworm", Variant: "huge"}}, errdefs.ErrInvalidArgument, "variant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, templates := newTestBuilder(t, func(c *BuilderConfig) {
				c.MaxContentBytes = 1 << 20
				if tc.name == "rootfs: outside roots" {
					c.SourceRoots = []string{t.TempDir()}
				}
			})
			_, err := b.Build(ctx, tc.req, nil, nil)
			if !errors.Is(err, tc.class) {
				t.Fatalf("err = %v, want %s", err, tc.class.Code())
			}
			var pub *errdefs.Public
			if !errors.As(err, &pub) {
				t.Fatalf("err %v is not tenant-safe (errdefs.Public)", err)
			}
			if !strings.Contains(pub.Message, tc.msg) || strings.Contains(pub.Message, templates) {
				t.Errorf("message %q: want it to mention %q and no host path", pub.Message, tc.msg)
			}
			ents, _ := os.ReadDir(templates)
			for _, e := range ents {
				if e.Name() != ".cache" {
					t.Errorf("failed build left %s behind", e.Name())
				}
			}
		})
	}
}

func TestParseRef(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		ref, name, digest string
		ok                bool
	}{
		{"python", "python", "", true},
		{"a", "a", "", true},
		{"0-x", "0-x", "", true},
		{"python@sha256:" + hex, "python", "sha256:" + hex, true},
		{"-x", "", "", false},
		{"Python", "", "", false},
		{"py_thon", "", "", false},
		{strings.Repeat("a", 63), strings.Repeat("a", 63), "", true},
		{strings.Repeat("a", 64), "", "", false},
		{"python@sha256:abc", "", "", false},
		{"python@md5:" + hex, "", "", false},
		{"../etc", "", "", false},
		{"", "", "", false},
	} {
		name, digest, err := ParseRef(tc.ref)
		if (err == nil) != tc.ok || name != tc.name || digest != tc.digest {
			t.Errorf("ParseRef(%q) = %q, %q, %v", tc.ref, name, digest, err)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseRef(%q) error class %v", tc.ref, err)
		}
	}
}

func TestLoadRecipe(t *testing.T) {
	req, err := LoadRecipe(filepath.Join("..", "..", "templates", "python.json"))
	if err != nil {
		t.Fatal(err)
	}
	if req.Name != "python" || req.Source.Type != SourceDebian || req.Source.Suite != "bookworm" {
		t.Errorf("python recipe = %+v", req)
	}
	for _, want := range []string{"python3", "python3-numpy", "python3-pandas", "python3-matplotlib", "python3-openpyxl"} {
		found := false
		for _, p := range req.Source.Packages {
			found = found || p == want
		}
		if !found {
			t.Errorf("python recipe lacks %s", want)
		}
	}
	if _, err := LoadRecipe(writeFile(t, "bad.json", []byte(`{"name":"x","sauce":{}}`))); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("unknown field accepted: %v", err)
	}
}

// A path outside the source roots is refused alike whether or not anything
// is there: a tenant cannot probe the host's files.
func TestSourcePathOutsideRootsNoOracle(t *testing.T) {
	roots := t.TempDir()
	existing := writeFile(t, "secret", []byte("x"))
	b, _ := newTestBuilder(t, func(c *BuilderConfig) { c.SourceRoots = []string{roots} })
	var msgs []string
	for _, p := range []string{existing, filepath.Join(filepath.Dir(existing), "missing"), roots + "/../" + filepath.Base(roots) + "-other"} {
		_, err := b.Build(context.Background(), BuildRequest{Name: "x", Source: Source{Type: SourceRootfs, Path: p}}, nil, nil)
		if !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Fatalf("%s: err = %v, want permission_denied", p, err)
		}
		msgs = append(msgs, strings.ReplaceAll(err.Error(), p, "P"))
	}
	for _, m := range msgs[1:] {
		if m != msgs[0] {
			t.Errorf("messages differ: %q vs %q", m, msgs[0])
		}
	}
}
