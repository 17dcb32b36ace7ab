package main

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"
)

// A layer's bytes depend on the files only: the same tree written twice,
// with every mtime changed and the directory listed in another order in
// between, gives the same digest; entries come sorted, parents first, with
// zero mtimes, numeric owners, hard links to the first name, xattrs kept.
func TestLayerIsReproducible(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "a-c"), 0o700))
	must(os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte("#!/bin/sh\necho hi\n"), 0o4755))
	must(os.Chmod(filepath.Join(root, "usr/bin/tool"), 0o755|os.ModeSetuid))
	must(os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "a-c/alias")))
	must(os.Symlink("usr/bin/tool", filepath.Join(root, "link")))
	must(os.WriteFile(filepath.Join(root, "a-c/owned"), []byte("x"), 0o640))
	must(os.Lchown(filepath.Join(root, "a-c/owned"), 65532, 65532))
	must(unix.Mkfifo(filepath.Join(root, "fifo"), 0o600))
	must(unix.Lsetxattr(filepath.Join(root, "usr/bin/tool"), "user.space-test", []byte("cap"), 0))
	must(os.MkdirAll(filepath.Join(root, "dev/pts"), 0o755))
	must(os.WriteFile(filepath.Join(root, "dev/null-ish"), nil, 0o644))

	spec := layerSpec{
		trees: []tree{{src: root, skipChildren: []string{"dev"}}},
		files: []entry{{name: "/opt/space/bin/extra", src: filepath.Join(root, "a-c/owned"), override: true, mode: 0o755}},
	}
	out := t.TempDir()
	first, err := writeLayer(spec, filepath.Join(out, "1.tar.gz"))
	must(err)
	later := time.Now().Add(-48 * time.Hour)
	must(filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, later, later)
	}))
	second, err := writeLayer(spec, filepath.Join(out, "2.tar.gz"))
	must(err)
	if first != second {
		t.Fatalf("same files, different layers: %+v and %+v", first, second)
	}

	f, err := os.Open(filepath.Join(out, "1.tar.gz"))
	must(err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	must(err)
	tr := tar.NewReader(zr)
	var names []string
	hdrs := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(err)
		names = append(names, h.Name)
		hdrs[h.Name] = h
		if !h.ModTime.Equal(epoch) || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %v owner names %q/%q, want the epoch and none", h.Name, h.ModTime, h.Uname, h.Gname)
		}
	}
	want := []string{"a-c/", "a-c/alias", "a-c/owned", "dev/", "fifo", "link", "opt/", "opt/space/", "opt/space/bin/", "opt/space/bin/extra", "usr/", "usr/bin/", "usr/bin/tool"}
	if len(names) != len(want) {
		t.Fatalf("entries %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("entries %q, want %q", names, want)
		}
	}
	// The hard link's first name in order is a-c/alias: it holds the bytes.
	if h := hdrs["a-c/alias"]; h.Typeflag != tar.TypeReg || h.Mode != 0o4755 || h.PAXRecords["SCHILY.xattr.user.space-test"] != "cap" {
		t.Errorf("a-c/alias: type %c mode %o xattrs %v", h.Typeflag, h.Mode, h.PAXRecords)
	}
	if h := hdrs["usr/bin/tool"]; h.Typeflag != tar.TypeLink || h.Linkname != "a-c/alias" {
		t.Errorf("usr/bin/tool: type %c → %q, want a hard link to a-c/alias", h.Typeflag, h.Linkname)
	}
	if h := hdrs["a-c/owned"]; h.Uid != 65532 || h.Gid != 65532 || h.Mode != 0o640 {
		t.Errorf("a-c/owned: %d:%d %o", h.Uid, h.Gid, h.Mode)
	}
	if h := hdrs["opt/space/bin/extra"]; h.Uid != 0 || h.Mode != 0o755 || h.Size != 1 {
		t.Errorf("override: %d %o size %d", h.Uid, h.Mode, h.Size)
	}
	if h := hdrs["link"]; h.Typeflag != tar.TypeSymlink || h.Linkname != "usr/bin/tool" {
		t.Errorf("link: %c %q", h.Typeflag, h.Linkname)
	}
	if h := hdrs["fifo"]; h.Typeflag != tar.TypeFifo {
		t.Errorf("fifo: %c", h.Typeflag)
	}
}
