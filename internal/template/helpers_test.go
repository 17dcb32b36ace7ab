package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ent is one tar entry of a test archive.
type ent struct {
	name string
	typ  byte // 0: a regular file
	body string
	link string
	mode int64
	uid  int
}

func dir(name string) ent              { return ent{name: name, typ: tar.TypeDir} }
func file(name, body string) ent       { return ent{name: name, body: body} }
func symlink(name, target string) ent  { return ent{name: name, typ: tar.TypeSymlink, link: target} }
func hardlink(name, target string) ent { return ent{name: name, typ: tar.TypeLink, link: target} }

func tarOf(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Uid: e.uid, Gid: e.uid,
			ModTime: time.Unix(1700000000, 0)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipOf(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func layerOf(t testing.TB, ents ...ent) v1.Layer {
	t.Helper()
	b := tarOf(t, ents...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// imageOf makes an image of layers with the given run configuration.
func imageOf(t testing.TB, arch string, conf v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", arch, conf
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func writeLayout(t testing.TB, img v1.Image) string {
	t.Helper()
	p, err := layout.Write(filepath.Join(t.TempDir(), "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return string(p)
}

func writeFile(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// tarDir archives a directory (an OCI layout) into a tar file.
func tarDir(t testing.TB, src string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.AddFS(os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	return writeFile(t, "archive.tar", buf.Bytes())
}

func newTestBuilder(t testing.TB, mod func(*BuilderConfig)) (*Builder, string) {
	t.Helper()
	templates := filepath.Join(t.TempDir(), "templates")
	agent := filepath.Join(t.TempDir(), "space-agent")
	if err := os.WriteFile(agent, []byte("stand-in agent\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := BuilderConfig{TemplatesDir: templates, AgentBinary: agent, HeadroomMiB: 16}
	if mod != nil {
		mod(&cfg)
	}
	b, err := NewBuilder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, templates
}

// progressLog records progress callbacks.
type progressLog struct{ steps []string }

func (p *progressLog) fn(step string, pct int) { p.steps = append(p.steps, step) }

func (p *progressLog) has(step string) bool {
	for _, s := range p.steps {
		if s == step {
			return true
		}
	}
	return false
}

// exists reports whether path exists in an ext4 image, by debugfs.
func exists(t *testing.T, image, path string) bool {
	t.Helper()
	return !strings.Contains(debugfsAny(t, image, "stat "+path), "File not found")
}

func debugfsAny(t *testing.T, image, req string) string {
	t.Helper()
	out, _ := runOut("debugfs", "-R", req, image)
	return out
}
