package guest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewcWriterReadableByCpio(t *testing.T) {
	needTool(t, "cpio")
	var buf bytes.Buffer
	cw := &CPIOWriter{w: &buf}
	cw.Dir("etc", 0o755)
	cw.File("etc/odd", 0o640, strings.NewReader("abc"), 3) // size not a multiple of 4
	cw.Symlink("etc/link", "odd")
	cw.CharDev("console", 0o600, 5, 1)
	cw.File("empty", 0o644, strings.NewReader(""), 0)
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d not 4-aligned", buf.Len())
	}

	archive := filepath.Join(t.TempDir(), "a.cpio")
	if err := os.WriteFile(archive, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("cpio", "-itv", "--quiet", "-F", archive).CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -itv: %v\n%s", err, out)
	}
	want := []struct{ prefix, name string }{
		{"drwxr-xr-x", "etc"},
		{"-rw-r-----", "etc/odd"},
		{"lrwxrwxrwx", "etc/link -> odd"},
		{"crw-------", "console"},
		{"-rw-r--r--", "empty"},
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(want) {
		t.Fatalf("cpio listed %d entries, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w.prefix) || !strings.HasSuffix(lines[i], w.name) {
			t.Errorf("entry %d = %q, want %s … %s", i, lines[i], w.prefix, w.name)
		}
	}
	if !strings.Contains(lines[3], "5,") {
		t.Errorf("console entry %q lacks device 5,1", lines[3])
	}

	dir := t.TempDir()
	cmd := exec.Command("cpio", "-id", "--quiet", "--nonmatching", "console")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(buf.Bytes())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -id: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "etc", "link")); string(got) != "abc" {
		t.Errorf("etc/link reads %q, want abc", got)
	}
}
