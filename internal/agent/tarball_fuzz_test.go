package agent

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzTarIn unpacks arbitrary archives as a tar upload does: whatever the
// archive holds (names with "..", absolute names, symlinks and hard links
// pointing out, entries through those links), tarIn must not panic and
// nothing may appear or change outside the target directory.
func FuzzTarIn(f *testing.F) {
	for _, entries := range [][]tarEntry{
		{{name: "d/", typ: tar.TypeDir}, {name: "d/f.txt", body: "file", typ: tar.TypeReg}},
		{{name: "esc", link: "../outside", typ: tar.TypeSymlink}, {name: "esc/planted", body: "x", typ: tar.TypeReg}},
		{{name: "abs", link: "/", typ: tar.TypeSymlink}, {name: "abs/planted", body: "x", typ: tar.TypeReg}},
		{{name: "../planted", body: "x", typ: tar.TypeReg}},
		{{name: "h", link: "../outside/secret", typ: tar.TypeLink}},
		{{name: "a", body: "a", typ: tar.TypeReg}, {name: "b", link: "a", typ: tar.TypeLink}, {name: "c", link: "b", typ: tar.TypeSymlink}},
	} {
		f.Add(fuzzTar(f, entries))
	}
	f.Fuzz(func(t *testing.T, archive []byte) {
		if !smallArchive(archive) {
			return // sparse or oversized members would only fill the disk
		}
		base := t.TempDir()
		outside := filepath.Join(base, "outside")
		if err := os.Mkdir(outside, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(base, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		fs := &files{root: root}
		_ = fs.tarIn("/dst/sub", bytes.NewReader(archive))
		// Only root/ and the untouched outside/ may exist under base.
		err := filepath.Walk(base, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(base, p)
			switch {
			case rel == "." || rel == "root" || strings.HasPrefix(rel, "root/"):
			case rel == "outside":
			case rel == "outside/secret":
				if b, err := os.ReadFile(p); err != nil || string(b) != "secret" || fi.Mode()&os.ModeType != 0 {
					t.Fatalf("outside/secret changed: %q %v %v", b, err, fi.Mode())
				}
			default:
				t.Fatalf("tar-in wrote %s outside its root", rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// smallArchive reports whether every member of archive is small and not
// sparse, so one fuzz run stays fast.
func smallArchive(archive []byte) bool {
	tr := tar.NewReader(bytes.NewReader(archive))
	for i := 0; ; i++ {
		h, err := tr.Next()
		if err != nil || i > 64 {
			return err == io.EOF || err != nil && i <= 64
		}
		if h.Size > 1<<20 || h.Typeflag == tar.TypeGNUSparse || len(h.PAXRecords) > 0 && hasSparse(h.PAXRecords) {
			return false
		}
	}
}

func hasSparse(recs map[string]string) bool {
	for k := range recs {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

type tarEntry struct {
	name, body, link string
	typ              byte
}

func fuzzTar(tb testing.TB, entries []tarEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			tb.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := io.WriteString(tw, e.body); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}
