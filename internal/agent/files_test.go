package agent

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// failingReader yields n bytes of data and then err, as an upload does
// when the disk fills, the body is cut off or the link dies.
type failingReader struct {
	n   int
	err error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, r.err
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

// dirNames lists dir's entries, the temporary ones included.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteFailureLeavesNothing(t *testing.T) {
	for _, cause := range []error{io.ErrUnexpectedEOF, errors.New("no space left on device")} {
		t.Run(cause.Error(), func(t *testing.T) {
			root := t.TempDir()
			f := &files{root: root}
			if err := os.MkdirAll(filepath.Join(root, "tmp"), 0o755); err != nil {
				t.Fatal(err)
			}
			if _, err := f.write("/tmp/kept", 0, strings.NewReader("old content")); err != nil {
				t.Fatal(err)
			}
			// A new file that fails half-way is not there at all.
			if _, err := f.write("/tmp/huge", 0, &failingReader{n: 3 << 20, err: cause}); err == nil {
				t.Fatal("write of a failing upload succeeded")
			}
			// A failed replacement leaves the old file whole.
			if _, err := f.write("/tmp/kept", 0, &failingReader{n: 1 << 20, err: cause}); err == nil {
				t.Fatal("write of a failing upload succeeded")
			}
			if got := dirNames(t, filepath.Join(root, "tmp")); len(got) != 1 || got[0] != "kept" {
				t.Fatalf("after failed writes /tmp holds %q, want only kept", got)
			}
			if b, _ := os.ReadFile(filepath.Join(root, "tmp/kept")); string(b) != "old content" {
				t.Fatalf("kept = %q after a failed replacement", b)
			}
		})
	}
}

func TestWriteReplacesAndKeepsOwner(t *testing.T) {
	root := t.TempDir()
	f := &files{root: root}
	p := filepath.Join(root, "f")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 1234, 2345); err != nil {
		t.Fatal(err)
	}
	info, err := f.write("/f", 0o750, strings.NewReader("new content"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "new content" || info.Size != int64(len("new content")) {
		t.Fatalf("content %q, size %d", b, info.Size)
	}
	if st.Mode().Perm() != 0o750 || info.Mode != 0o750 {
		t.Fatalf("mode %v, info %o", st.Mode().Perm(), info.Mode)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1234 || sys.Gid != 2345 {
		t.Fatalf("owner %d:%d, want the replaced file's 1234:2345", sys.Uid, sys.Gid)
	}
	if got := dirNames(t, root); len(got) != 1 {
		t.Fatalf("root holds %q", got)
	}
}

func TestTarInCutOffKeepsWholeMembersOnly(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range []struct {
		name string
		size int
	}{{"a.txt", 10}, {"big.bin", 1 << 20}} {
		if err := tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(m.size), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(bytes.Repeat([]byte{'y'}, m.size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	archive := buf.Bytes()
	root := t.TempDir()
	f := &files{root: root}
	// Cut in the middle of big.bin.
	err := f.tarIn("/dst", bytes.NewReader(archive[:len(archive)/2]))
	if err == nil {
		t.Fatal("tar-in of a cut-off archive succeeded")
	}
	if got := dirNames(t, filepath.Join(root, "dst")); len(got) != 1 || got[0] != "a.txt" {
		t.Fatalf("after a cut-off archive dst holds %q, want only the whole member a.txt", got)
	}
}
