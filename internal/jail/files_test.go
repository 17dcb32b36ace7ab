package jail_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/jail"
)

// plants are what a VMM that took over its jail can leave where the host
// expects a file of its own, each aimed at a host file outside its dir.
var plants = []struct {
	name  string
	plant func(t *testing.T, at, outside string)
}{
	{"symlink", func(t *testing.T, at, outside string) { must(t, os.Symlink(outside, at)) }},
	{"hardlink", func(t *testing.T, at, outside string) { must(t, os.Link(outside, at)) }},
	{"fifo", func(t *testing.T, at, outside string) { must(t, unix.Mkfifo(at, 0o666)) }},
	{"dir", func(t *testing.T, at, outside string) { must(t, os.Mkdir(at, 0o777)) }},
	{"symlink to dir", func(t *testing.T, at, outside string) { must(t, os.Symlink(filepath.Dir(outside), at)) }},
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// outsideFile is a root file, 0644, outside the dir a test plants in.
func outsideFile(t *testing.T) (string, func(t *testing.T)) {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "host-secret")
	want := []byte("host secret\n")
	must(t, os.WriteFile(p, want, 0o644))
	must(t, os.Chmod(p, 0o644))
	return p, func(t *testing.T) {
		t.Helper()
		b, err := os.ReadFile(p)
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if err != nil || !bytes.Equal(b, want) || st.Uid != 0 || st.Mode&0o7777 != 0o644 {
			t.Errorf("outside file changed: %q (%v), uid %d, mode %#o", b, err, st.Uid, st.Mode&0o7777)
		}
	}
}

func wantRefused(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Error("the host operation went through; want it refused")
		return
	}
	if !errors.Is(err, errdefs.ErrInternal) || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("error = %v, want a refusal (internal)", err)
	}
}

// TestOwnRefusesPlantedFiles: jail.Start chowns and chmods the files the
// VMM will write; a symlink, hardlink, FIFO or directory where one should
// be is refused, and the host file it points at keeps its owner and mode.
func TestOwnRefusesPlantedFiles(t *testing.T) {
	requireRoot(t)
	for _, p := range plants {
		t.Run(p.name, func(t *testing.T) {
			outside, unchanged := outsideFile(t)
			dir := t.TempDir()
			own := filepath.Join(dir, "memory")
			p.plant(t, own, outside)
			j, err := jail.Start(jail.Spec{Root: dir, Own: []string{own}, Path: "/usr/bin/true", Args: []string{"true"},
				Limits: jail.Limits{MemoryBytes: 64 << 20, PIDs: 16, CPUs: 0.5}})
			if j != nil {
				_ = j.Cmd.Wait()
				j.State.Release()
			}
			wantRefused(t, err)
			unchanged(t)
		})
	}
}

func TestOpenInChecks(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	d, err := jail.OpenDir(dir)
	must(t, err)
	defer d.Close()
	for _, p := range plants {
		t.Run(p.name, func(t *testing.T) {
			outside, unchanged := outsideFile(t)
			name := strings.ReplaceAll(p.name, " ", "-")
			p.plant(t, filepath.Join(dir, name), outside)
			f, err := jail.OpenIn(d, name, os.O_RDWR|os.O_TRUNC, jail.OwnedByHostOrVMM)
			if f != nil {
				f.Close()
			}
			wantRefused(t, err)
			_, err = jail.CreateIn(d, name, 0o600)
			wantRefused(t, err)
			err = jail.MoveOut(d, name, filepath.Join(t.TempDir(), "moved"), jail.OwnedByHostOrVMM)
			wantRefused(t, err)
			unchanged(t)
		})
	}
	t.Run("owner", func(t *testing.T) {
		must(t, os.WriteFile(filepath.Join(dir, "root-file"), []byte("x"), 0o600))
		_, err := jail.OpenIn(d, "root-file", os.O_RDONLY, jail.OwnedBy(jail.FirstID+7))
		wantRefused(t, err)
	})
	t.Run("moves a regular file", func(t *testing.T) {
		must(t, os.WriteFile(filepath.Join(dir, "state"), []byte("state"), 0o600))
		dst := filepath.Join(t.TempDir(), "vmstate")
		must(t, jail.MoveOut(d, "state", dst, jail.OwnedBy(0)))
		if b, err := os.ReadFile(dst); err != nil || string(b) != "state" {
			t.Errorf("moved file: %q, %v", b, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, "state")); !os.IsNotExist(err) {
			t.Errorf("source still there: %v", err)
		}
	})
}
