package convention

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/testenv"
)

// maxCommittedBytes bounds a file in the repository: past it a file is a
// build output, a data dump or a binary, none of which belong in git.
const maxCommittedBytes = 1 << 20

// elfMagic opens every Linux executable and shared object.
var elfMagic = []byte{0x7f, 'E', 'L', 'F'}

// TestNoBuildOutputsCommitted: no tracked file is over maxCommittedBytes or
// an ELF binary. Build outputs go to bin/ (ignored); a bench command is run
// with `go run`, never committed built.
func TestNoBuildOutputsCommitted(t *testing.T) {
	root := testenv.ModuleRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): nothing to check", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		if problem := committedProblem(filepath.Join(root, name)); problem != "" {
			t.Errorf("%s is committed but %s", name, problem)
		}
	}
}

// committedProblem says why the file at path must not be committed, or "".
// A tracked file missing from the work tree (deleted, not yet committed) is
// not one.
func committedProblem(path string) string {
	info, err := os.Lstat(path)
	if err != nil || !info.Mode().IsRegular() {
		return ""
	}
	if info.Size() > maxCommittedBytes {
		return "is over 1 MiB: a build output or data that belongs outside git"
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, len(elfMagic))
	if n, _ := f.Read(head); n == len(head) && bytes.Equal(head, elfMagic) {
		return "is an ELF binary: build it, do not commit it"
	}
	return ""
}

func TestCommittedProblem(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name    string
		data    []byte
		problem bool
	}{
		{"source.go", []byte("package x\n"), false},
		{"elf", append(append([]byte{}, elfMagic...), 2, 1, 1), true},
		{"big.bin", make([]byte, maxCommittedBytes+1), true},
		{"edge.bin", make([]byte, maxCommittedBytes), false},
	} {
		if got := committedProblem(write(tc.name, tc.data)) != ""; got != tc.problem {
			t.Errorf("%s: problem %v, want %v", tc.name, got, tc.problem)
		}
	}
}
