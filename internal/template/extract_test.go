package template

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
)

// applyLayers extracts layers into a fresh root inside a fresh parent dir
// that also holds a sentinel; it returns root and the sentinel dir.
func applyLayers(t *testing.T, layers ...[]byte) (root, sentinel string, err error) {
	t.Helper()
	needBuildHost(t)
	parent := t.TempDir()
	root, sentinel = filepath.Join(parent, "root"), filepath.Join(parent, "outside")
	for _, d := range []string{root, sentinel} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(sentinel, "victim"), []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	var used int64
	a, err := newApplier(root, &used, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i, l := range layers {
		if err = a.apply(context.Background(), bytes.NewReader(l), "layer", true); err != nil {
			return root, sentinel, err
		}
		_ = i
	}
	return root, sentinel, nil
}

// checkSentinel fails when anything outside the root changed.
func checkSentinel(t *testing.T, sentinel string) {
	t.Helper()
	ents, err := os.ReadDir(sentinel)
	if err != nil || len(ents) != 1 {
		t.Fatalf("outside dir changed: %v %v", ents, err)
	}
	if b, err := os.ReadFile(filepath.Join(sentinel, "victim")); err != nil || string(b) != "untouched" {
		t.Fatalf("victim = %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(sentinel), "escape")); err == nil {
		t.Fatal("a file was written next to the root")
	}
}

func TestApplyTraversal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layers [][]byte
		reject bool   // the archive must be refused
		inside string // else: this path (relative to root) holds the write
	}{
		{"dotdot name", [][]byte{tarOf(t, file("../escape", "x"))}, true, ""},
		{"dotdot inside name", [][]byte{tarOf(t, file("a/../../escape", "x"))}, true, ""},
		{"absolute name stays inside", [][]byte{tarOf(t, file("/abs", "x"))}, false, "abs"},
		{"symlink to / then write through it", [][]byte{tarOf(t, symlink("link", "/"), file("link/escape", "x"))}, false, "escape"},
		{"symlink climbing out then write", [][]byte{tarOf(t, symlink("up", "../../../../.."), file("up/escape", "x"))}, false, "escape"},
		{"dangling symlink to the outside dir", [][]byte{tarOf(t, symlink("out", "/../outside")), tarOf(t, file("out/victim", "pwned"))}, true, ""},
		{"symlink to the outside dir, made inside", [][]byte{tarOf(t, dir("outside/"), symlink("out", "/../outside")), tarOf(t, file("out/victim", "pwned"))}, false, "outside/victim"},
		{"symlink in a lower layer", [][]byte{tarOf(t, symlink("etc", "../outside")), tarOf(t, dir("etc/"), file("etc/victim", "pwned"))}, false, "etc/victim"},
		{"symlink in a lower layer, no dir entry", [][]byte{tarOf(t, dir("outside/"), symlink("etc", "../outside")), tarOf(t, file("etc/victim", "pwned"))}, false, "outside/victim"},
		{"hard link out", [][]byte{tarOf(t, hardlink("h", "../outside/victim"))}, true, ""},
		{"hard link through symlink", [][]byte{tarOf(t, symlink("s", "/../outside"), hardlink("h", "s/victim"))}, true, ""},
		{"whiteout through symlink", [][]byte{tarOf(t, symlink("s", "../outside")), tarOf(t, file("s/.wh.victim", ""))}, false, ""},
		{"opaque through symlink", [][]byte{tarOf(t, symlink("s", "../outside")), tarOf(t, file("s/.wh..wh..opq", ""))}, false, ""},
		{"whiteout of dotdot", [][]byte{tarOf(t, file(".wh..", ""))}, true, ""},
		{"replace a symlink with a file", [][]byte{tarOf(t, symlink("f", "../outside/victim")), tarOf(t, file("f", "new"))}, false, "f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, sentinel, err := applyLayers(t, tc.layers...)
			if tc.reject {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("err = %v, want invalid_argument", err)
				}
			} else if err != nil {
				t.Fatalf("err = %v", err)
			}
			checkSentinel(t, sentinel)
			if tc.inside != "" {
				fi, err := os.Lstat(filepath.Join(root, tc.inside))
				if err != nil || !fi.Mode().IsRegular() {
					t.Errorf("%s inside the root: %v", tc.inside, err)
				}
			}
		})
	}
}

func TestApplyWhiteouts(t *testing.T) {
	root, sentinel, err := applyLayers(t,
		tarOf(t, dir("a/"), file("a/x", "1"), dir("a/d/"), file("a/d/y", "1"), file("b", "1"), dir("c/"), file("c/z", "1")),
		tarOf(t, file("a/d/new", "2"), file("a/.wh..wh..opq", ""), file("a/after", "2"), file(".wh.b", ""), file("c/.wh.z", ""), file("c/.wh.none", "")),
		tarOf(t, file("b", "3"), file(".wh.b", "")), // a same-layer whiteout hides lower layers only
	)
	if err != nil {
		t.Fatal(err)
	}
	checkSentinel(t, sentinel)
	for path, want := range map[string]bool{
		"a/x": false, "a/d/y": false, "a/d/new": true, "a/after": true, "a/.wh..wh..opq": false,
		"b": true, ".wh.b": false, "c": true, "c/z": false, "c/.wh.none": false,
	} {
		_, err := os.Lstat(filepath.Join(root, path))
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", path, got, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "b")); string(b) != "3" {
		t.Errorf("b = %q, want the top layer's", b)
	}
}

func TestApplyReplacesTypes(t *testing.T) {
	root, _, err := applyLayers(t,
		tarOf(t, dir("p/"), file("p/inner", "1"), file("q", "1")),
		tarOf(t, file("p", "now a file"), dir("q/"), file("q/inner", "2")),
	)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "p")); string(b) != "now a file" {
		t.Errorf("p = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "q", "inner")); string(b) != "2" {
		t.Errorf("q/inner = %q", b)
	}
}
