package agentclient_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

func TestFileOps(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	info, err := e.c.WriteFile(ctx, "/a/b/c.txt", 0o600, 5, strings.NewReader("hello"))
	if err != nil || info.Size != 5 || info.Mode != 0o600 || info.Type != agentproto.FileTypeFile {
		t.Fatalf("write: %+v %v", info, err)
	}
	rc, info, err := e.c.ReadFile(ctx, "/a/b/c.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != "hello" || info.Name != "c.txt" {
		t.Fatalf("read %q %+v %v", got, info, err)
	}
	big := bytes.Repeat([]byte("0123456789"), 300000)
	if _, err := e.c.WriteFile(ctx, "/a/big", 0, int64(len(big)), bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.root, "a/big")); !bytes.Equal(b, big) {
		t.Fatal("big file differs")
	}
	if err := os.Symlink("b/c.txt", filepath.Join(e.root, "a/link")); err != nil {
		t.Fatal(err)
	}
	entries, err := e.c.ListDir(ctx, "/a")
	if err != nil || len(entries) != 3 || entries[0].Name != "b" || entries[0].Type != agentproto.FileTypeDir ||
		entries[1].Name != "big" || entries[2].Type != agentproto.FileTypeSymlink {
		t.Fatalf("list: %+v %v", entries, err)
	}
	if st, err := e.c.Stat(ctx, "/a/link"); err != nil || st.Type != agentproto.FileTypeSymlink {
		t.Fatalf("stat link: %+v %v", st, err)
	}
	if st, err := e.c.Stat(ctx, "/"); err != nil || st.Type != agentproto.FileTypeDir {
		t.Fatalf("stat /: %+v %v", st, err)
	}

	errTests := []struct {
		name string
		err  error
		want *errdefs.Class
	}{
		{"stat missing", second(e.c.Stat(ctx, "/nope")), errdefs.ErrNotFound},
		{"relative", second(e.c.Stat(ctx, "a/b")), errdefs.ErrInvalidArgument},
		{"nul", second(e.c.Stat(ctx, "/a\x00b")), errdefs.ErrInvalidArgument},
		{"read dir", third(e.c.ReadFile(ctx, "/a")), errdefs.ErrInvalidArgument},
		{"write over dir", second(e.c.WriteFile(ctx, "/a/b", 0, 0, strings.NewReader("x"))), errdefs.ErrInvalidArgument},
		{"list file", second(e.c.ListDir(ctx, "/a/big")), errdefs.ErrInvalidArgument},
		{"delete non-empty", e.c.Delete(ctx, "/a", false), errdefs.ErrConflict},
		{"delete root", e.c.Delete(ctx, "/", true), errdefs.ErrInvalidArgument},
		{"delete missing", e.c.Delete(ctx, "/zzz", false), errdefs.ErrNotFound},
	}
	for _, tt := range errTests {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, tt.err, tt.want)
		} else if strings.Contains(tt.err.Error(), e.root) {
			t.Errorf("%s: message leaks the host path: %v", tt.name, tt.err)
		}
	}
	if err := e.c.Delete(ctx, "/a", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(e.root, "a")); !os.IsNotExist(err) {
		t.Fatalf("still there: %v", err)
	}
}

func second[T any](_ T, err error) error        { return err }
func third[T, U any](_ T, _ U, err error) error { return err }

func TestPathTraversal(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	// ".." cannot climb above the root.
	if _, err := e.c.WriteFile(ctx, "/../../../x", 0, 0, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.root, "x")); err != nil {
		t.Fatalf("/../../../x not under the root: %v", err)
	}
	// Symlinks pointing outside, absolute or relative, resolve inside.
	for _, target := range []string{outside, "../../../../../../" + outside} {
		link := filepath.Join(e.root, "esc")
		os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.c.ReadFile(ctx, "/esc/secret"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("read through %s: %v", target, err)
		}
		if _, err := e.c.WriteFile(ctx, "/esc/planted", 0, 0, strings.NewReader("x")); err == nil {
			if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
				t.Fatal("write escaped the root")
			}
		}
		if err := e.c.Delete(ctx, "/esc/secret", false); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("delete through %s: %v", target, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != "host secret" {
		t.Fatalf("outside file touched: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		t.Fatal("file planted outside the root")
	}
}

type tarEntry struct {
	name, body, link string
	typ              byte
}

func makeTar(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, en := range entries {
		h := &tar.Header{Name: en.name, Typeflag: en.typ, Mode: 0o644, Size: int64(len(en.body)), Linkname: en.link}
		if en.typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if en.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if en.typ == tar.TypeReg {
			tw.Write([]byte(en.body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func TestTarRoundTrip(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	archive := makeTar(t, []tarEntry{
		{name: "d/", typ: tar.TypeDir},
		{name: "d/f.txt", body: "file", typ: tar.TypeReg},
		{name: "d/sub/deep.txt", body: "deep", typ: tar.TypeReg},
		{name: "d/ln", link: "f.txt", typ: tar.TypeSymlink},
		{name: "d/hard", link: "d/f.txt", typ: tar.TypeLink},
	})
	if err := e.c.TarIn(ctx, "/src", bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	rc, err := e.c.TarOut(ctx, "/src")
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.TarIn(ctx, "/copy", bytes.NewReader(out)); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"copy/d/f.txt": "file", "copy/d/sub/deep.txt": "deep", "copy/d/ln": "file", "copy/d/hard": "file"} {
		if b, err := os.ReadFile(filepath.Join(e.root, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(e.root, "copy/d/ln")); err != nil || l != "f.txt" {
		t.Errorf("symlink: %q %v", l, err)
	}
	if _, err := e.c.TarOut(ctx, "/missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("tar out missing: %v", err)
	}
}

func TestTarInCannotEscape(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	outside := t.TempDir()
	tests := []struct {
		name    string
		entries []tarEntry
		wantErr *errdefs.Class // nil: may succeed, but only inside the target
	}{
		{"dotdot", []tarEntry{{name: "../../evil", body: "x", typ: tar.TypeReg}}, errdefs.ErrInvalidArgument},
		{"absolute", []tarEntry{{name: outside + "/evil", body: "x", typ: tar.TypeReg}}, errdefs.ErrInvalidArgument},
		{"hardlink out", []tarEntry{{name: "h", link: "../../etc/passwd", typ: tar.TypeLink}}, errdefs.ErrInvalidArgument},
		{"symlink abs then write", []tarEntry{
			{name: "esc", link: outside, typ: tar.TypeSymlink},
			{name: "esc/evil", body: "x", typ: tar.TypeReg},
		}, nil},
		{"symlink rel then write", []tarEntry{
			{name: "up", link: "../../../../../../../../" + outside, typ: tar.TypeSymlink},
			{name: "up/evil", body: "x", typ: tar.TypeReg},
		}, nil},
		{"symlink to /etc", []tarEntry{
			{name: "etc", link: "/etc", typ: tar.TypeSymlink},
			{name: "etc/space-agent-test-evil", body: "x", typ: tar.TypeReg},
		}, nil},
	}
	for _, tt := range tests {
		err := e.c.TarIn(ctx, "/target/"+strings.ReplaceAll(tt.name, " ", "_"), bytes.NewReader(makeTar(t, tt.entries)))
		if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.wantErr)
		}
		if _, err := os.Stat(filepath.Join(outside, "evil")); err == nil {
			t.Fatalf("%s: wrote outside the target", tt.name)
		}
		if _, err := os.Stat("/etc/space-agent-test-evil"); err == nil {
			os.Remove("/etc/space-agent-test-evil")
			t.Fatalf("%s: wrote into the host's /etc", tt.name)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(e.root), "evil")); err == nil {
			t.Fatalf("%s: wrote above the root", tt.name)
		}
	}
}

// failingReader yields n bytes, then fails (a client that went away).
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errors.New("client went away")
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

// An upload cut short on the host's side leaves neither a truncated file
// nor a temporary one, and an existing file keeps its content.
func TestWriteFileCutShortKeepsNothing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if _, err := e.c.WriteFile(ctx, "/kept", 0, 3, strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		path string
		size int64
		r    io.Reader
	}{
		{"sender fails", "/new", 1 << 20, &failingReader{n: 64 << 10}},
		{"stream ends short", "/new", 1 << 20, strings.NewReader("only this much")},
		{"replacing, sender fails", "/kept", 1 << 20, &failingReader{n: 1000}},
		{"longer than announced", "/new", 4, strings.NewReader("more than four bytes")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.c.WriteFile(ctx, tc.path, 0, tc.size, tc.r); err == nil {
				t.Fatal("a cut upload succeeded")
			}
			// The agent notices the cut after the client has given up:
			// await its clean-up, bounded.
			var left []string
			for deadline := time.Now().Add(10 * time.Second); ; {
				entries, err := os.ReadDir(e.root)
				if err != nil {
					t.Fatal(err)
				}
				left = left[:0]
				for _, de := range entries {
					if de.Name() != "kept" {
						left = append(left, de.Name())
					}
				}
				if len(left) == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
			if b, _ := os.ReadFile(filepath.Join(e.root, "kept")); string(b) != "old" {
				t.Errorf("kept file now holds %q", b)
			}
		})
	}
}
