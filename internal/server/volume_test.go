package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/storage"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker"
)

type fakeLister struct {
	sbs []worker.SandboxStatus
	err error
}

func (f fakeLister) Sandboxes(context.Context) ([]worker.SandboxStatus, error) { return f.sbs, f.err }

// TestShutdownReleasesVolume: at shutdown the loop-mounted data volume is
// unmounted and its loop device detached, unless sandbox VMs are left
// running on it for the next spaced to adopt (or the worker cannot say).
func TestShutdownReleasesVolume(t *testing.T) {
	requireLoop(t)
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name   string
		worker fakeLister
		keep   bool
	}{
		{"no sandboxes", fakeLister{}, false},
		{"only stopped and suspended", fakeLister{sbs: []worker.SandboxStatus{
			{ID: "sbx_a", State: worker.VMStopped}, {ID: "sbx_b", State: worker.VMSuspended}}}, false},
		{"a running VM", fakeLister{sbs: []worker.SandboxStatus{
			{ID: "sbx_a", State: worker.VMSuspended}, {ID: "sbx_b", State: worker.VMRunning}}}, true},
		{"a paused VM", fakeLister{sbs: []worker.SandboxStatus{{ID: "sbx_a", State: worker.VMPaused}}}, true},
		{"worker cannot say", fakeLister{err: errors.New("boom")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			st, err := storage.Open(ctx, storage.Config{DataDir: dir, ImageSizeGiB: storage.MinImageGiB}, log)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := st.Unmount(context.Background()); err != nil {
					t.Errorf("cleanup unmount: %v", err)
				}
				awaitNoLoop(t, st.Image())
			})
			if st.Image() == "" {
				t.Skipf("temp dir %s reflinks natively; the loop-mounted volume needs one that does not", dir)
			}
			if len(loopDevicesOf(st.Image())) != 1 {
				t.Fatalf("loop devices on the image: %v", loopDevicesOf(st.Image()))
			}

			releaseVolume(ctx, st, vmsLeftRunning(ctx, tc.worker, log), log)

			if got := mounted(t, st.Root()); got != tc.keep {
				t.Fatalf("mounted after shutdown = %v, want %v", got, tc.keep)
			}
			if !tc.keep {
				awaitNoLoop(t, st.Image())
			}
		})
	}
}

// requireLoop skips unless this host can loop-mount a btrfs image (CI can).
func requireLoop(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "loop-mounting a btrfs image")
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("needs loop devices (/dev/loop-control)")
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		t.Skip("needs mkfs.btrfs (Debian package btrfs-progs)")
	}
}

func mounted(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

// awaitNoLoop waits (bounded) until no loop device is backed by image: an
// autoclear loop device goes just after the unmount returns.
func awaitNoLoop(t *testing.T, image string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if devs := loopDevicesOf(image); len(devs) > 0 {
			return fmt.Errorf("loop devices still attached to %s: %v", image, devs)
		}
		return nil
	})
}

func loopDevicesOf(image string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var devs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == image {
			devs = append(devs, strings.Split(f, "/")[3])
		}
	}
	return devs
}
