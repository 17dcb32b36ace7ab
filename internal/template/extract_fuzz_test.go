package template

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
)

// hostCanary is a host path seeds aim absolute names and symlinks at; an
// extraction that escaped its root would create it. Fixed, as the seeds
// in testdata name it.
const hostCanary = "/tmp/space-fuzz-escape"

// fuzzLimit bounds what one input may write, so huge sizes in headers are
// refused rather than filling the disk, and every run stays fast.
const fuzzLimit = 1 << 20

// FuzzApply feeds arbitrary bytes to the tar extractor, first as a rootfs
// archive and then, over the result, as an image layer (whiteouts apply),
// so links an entry plants can be used by a later one. Whatever the input,
// it must not panic, must write nothing outside the extraction root and
// must not name a host path in its error.
func FuzzApply(f *testing.F) {
	needBuildHost(f)
	base := fuzzScratch(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		parent, err := os.MkdirTemp(base, "apply-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(parent) })
		root, outside := filepath.Join(parent, "root"), filepath.Join(parent, "outside")
		for _, d := range []string{root, outside} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		victim := filepath.Join(outside, "victim")
		if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := snapshotOutside(t, parent)

		var used int64
		a, err := newApplier(root, &used, fuzzLimit)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		ctx := context.Background()
		err = a.apply(ctx, bytes.NewReader(data), "rootfs", false)
		if err == nil {
			err = a.apply(ctx, bytes.NewReader(data), "layer 2 of 2", true)
		}

		if err != nil {
			if strings.Contains(err.Error(), parent) {
				t.Errorf("error names a host path: %v", err)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrResourceExhausted) {
				t.Errorf("error %v is not the archive's fault (class %s)", err, errdefs.ClassOf(err))
			}
		}
		if used > fuzzLimit {
			t.Errorf("wrote %d content bytes, limit %d", used, fuzzLimit)
		}
		if after := snapshotOutside(t, parent); after != before {
			t.Errorf("outside the root changed:\nbefore %s\nafter  %s", before, after)
		}
		if _, err := os.Lstat(hostCanary); err == nil {
			os.RemoveAll(hostCanary)
			t.Errorf("%s was created on the host", hostCanary)
		}
	})
}

// fuzzScratch is where FuzzApply extracts: tmpfs when the host has one at
// /dev/shm, since extraction is all metadata writes (some 15 times more
// runs per second than on a disk), else the test's temp dir.
func fuzzScratch(f *testing.F) string {
	if d, err := os.MkdirTemp("/dev/shm", "space-fuzz-"); err == nil {
		f.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return f.TempDir()
}

// snapshotOutside describes everything under parent but what root holds:
// names, types, modes, owners, link counts (a hard link to a file outside
// raises it) and file contents.
func snapshotOutside(t *testing.T, parent string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(parent, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(parent, p)
		if rel == "root" {
			return filepath.SkipDir // the extraction's own
		}
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %s %d:%d n%d", path.Join("/", filepath.ToSlash(rel)), fi.Mode(), st.Uid, st.Gid, st.Nlink)
		if fi.Mode().IsRegular() {
			c, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteString("; ")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// FuzzCleanName checks the one function every entry and hard link target
// passes through: what it accepts is relative, clean and inside the root.
func FuzzCleanName(f *testing.F) {
	f.Fuzz(func(t *testing.T, name string) {
		rel, ok := cleanName(name)
		if !ok {
			if !strings.Contains(name, "..") && strings.IndexByte(name, 0) < 0 {
				t.Errorf("%q refused, but it has no .. and no NUL", name)
			}
			return
		}
		if rel == "" {
			return
		}
		if path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") || path.Clean(rel) != rel || strings.IndexByte(rel, 0) >= 0 {
			t.Errorf("cleanName(%q) = %q: not a clean path inside the root", name, rel)
		}
	})
}
