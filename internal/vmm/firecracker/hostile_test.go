package firecracker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
)

// TestLogsBounded: a VMM that writes 8 MiB to its console, its stderr
// and its logger (a guest flooding its serial console and tripping device
// errors) leaves at most each log's bound on disk, live and old part,
// sampled all along; the driver reads nothing meanwhile (the bound is the
// log copier's, not a goroutine of the worker's), and the last line is
// kept.
func TestLogsBounded(t *testing.T) {
	const flood = 8 << 20
	r := newRig(t, standinConfig{Flood: flood})
	ctx := ctxT(t)
	spec := r.spec("vm-flood")
	vm, err := r.d.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, vm)
	logs := map[string]int64{fileConsole: consoleKeep, fileVMMLog: vmmLogKeep, fileHostLog: vmmLogKeep}
	check := func() {
		t.Helper()
		for f, keep := range logs {
			for _, p := range []string{filepath.Join(spec.StateDir, f), jail.OldLogPath(filepath.Join(spec.StateDir, f))} {
				if st, err := os.Stat(p); err == nil && st.Size() > keep {
					t.Fatalf("%s: %d bytes, want at most %d", filepath.Base(p), st.Size(), keep)
				}
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		check()
		done := 0
		for f, keep := range logs {
			// The stand-in's boot message may come after the flood.
			if bytes.Contains(jail.ReadLog(filepath.Join(spec.StateDir, f), keep), []byte("x\nLAST LINE\n")) {
				done++
			}
		}
		if done == len(logs) {
			break
		}
		if time.Now().After(deadline) {
			for f, keep := range logs {
				b := jail.ReadLog(filepath.Join(spec.StateDir, f), keep)
				t.Logf("%s: %d bytes, ends %q", f, len(b), b[max(len(b)-30, 0):])
			}
			t.Fatal("the flood's last lines never arrived")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := vm.ConsoleTail(3); !slices.Contains(got, "LAST LINE") {
		t.Errorf("ConsoleTail = %q", got)
	}
	if err := vm.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, spec.StateDir)
}

// outsideFile is a host file outside every run dir, and a check that it is
// as it was.
func outsideFile(t *testing.T) (string, func(t *testing.T)) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "host-secret")
	want := []byte("host secret\n")
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, func(t *testing.T) {
		t.Helper()
		b, err := os.ReadFile(p)
		st, serr := os.Stat(p)
		if err != nil || serr != nil || !bytes.Equal(b, want) || st.Mode().Perm() != 0o644 || st.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("host file outside the run dir changed: %q (%v, %v)", b, err, serr)
		}
	}
}

func wantRefused(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s went through; want it refused", what)
		return
	}
	if !errors.Is(err, errdefs.ErrInternal) || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("%s: %v, want a refusal (internal)", what, err)
	}
}

// TestSnapshotRefusesPlantedFiles: a VMM that leaves a symlink, a hardlink,
// a FIFO or a directory where its snapshot's memory.new and vmstate.new go
// has the snapshot refused; the host file they point at is unchanged, and
// neither the memory file nor the snapshot dir holds what was planted.
func TestSnapshotRefusesPlantedFiles(t *testing.T) {
	for _, kind := range []string{"symlink", "hardlink", "fifo", "dir"} {
		t.Run(kind, func(t *testing.T) {
			outside, unchanged := outsideFile(t)
			r := newRig(t, standinConfig{Plant: kind, PlantTarget: outside})
			ctx := ctxT(t)
			spec := r.spec("vm-" + kind)
			if err := os.WriteFile(spec.MemoryFile, []byte("guest memory"), 0o600); err != nil {
				t.Fatal(err)
			}
			vm, err := r.d.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			stopOnCleanup(t, vm)
			if err := vm.(vmm.Pauser).Pause(ctx); err != nil {
				t.Fatal(err)
			}
			snap := filepath.Join(r.dir, "snap")
			wantRefused(t, "snapshot with a planted "+kind, vm.(vmm.Snapshotter).Snapshot(ctx, snap))
			unchanged(t)
			for _, p := range []string{spec.MemoryFile, filepath.Join(snap, StateFile)} {
				st, err := os.Lstat(p)
				if err != nil {
					continue
				}
				if !st.Mode().IsRegular() || st.Sys().(*syscall.Stat_t).Nlink != 1 {
					t.Errorf("%s is now a %v with %d links", filepath.Base(p), st.Mode().Type(), st.Sys().(*syscall.Stat_t).Nlink)
				}
			}
		})
	}
}

// TestIncomingRefusesPlantedFiles: the host copies a snapshot's state into
// the run dir of a VMM waiting to restore, and gives the copy to its uid.
// A symlink the VMM planted there to a host file is not written through
// or chowned; a symlink in place of the snapshot's state file is not
// read.
func TestIncomingRefusesPlantedFiles(t *testing.T) {
	r := newRig(t, standinConfig{})
	ctx := ctxT(t)
	spec := r.spec("vm-src")
	vm, err := r.d.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, vm)
	_ = vm.(vmm.Pauser).Pause(ctx)
	snap := filepath.Join(r.dir, "snap")
	if err := vm.(vmm.Snapshotter).Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	_ = vm.Stop(ctx)

	for i, tc := range []struct {
		name   string
		plant  func(t *testing.T, pool vmm.BootSpec, outside string) string // the snapshot dir to load
		refuse bool
	}{
		{"symlink in the run dir", func(t *testing.T, pool vmm.BootSpec, outside string) string {
			must(t, os.Symlink(outside, filepath.Join(pool.StateDir, dirRun, fileLoadState)))
			return snap
		}, false},
		{"symlink as the snapshot's state", func(t *testing.T, pool vmm.BootSpec, outside string) string {
			bad := filepath.Join(r.dir, "bad-snap")
			must(t, os.MkdirAll(bad, 0o700))
			must(t, os.Symlink(outside, filepath.Join(bad, StateFile)))
			return bad
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outside, unchanged := outsideFile(t)
			pool := r.spec(fmt.Sprintf("pool-%d", i))
			copyTestFile(t, spec.MemoryFile, pool.MemoryFile)
			pv, err := r.d.StartIncoming(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			stopOnCleanup(t, pv)
			err = pv.(*VM).Incoming(ctx, tc.plant(t, pool, outside))
			if tc.refuse {
				wantRefused(t, "restore from a planted state file", err)
			} else if err != nil {
				t.Errorf("Incoming: %v", err)
			}
			unchanged(t)
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSocketsNotFollowed: the API and vsock sockets are in the VMM's run
// dir; a VMM that replaces them with symlinks to another socket (another
// sandbox's agent, a host daemon) does not get the host to connect there.
func TestSocketsNotFollowed(t *testing.T) {
	r := newRig(t, standinConfig{})
	ctx := ctxT(t)
	spec := r.spec("vm-sockets")
	vm, err := r.d.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, vm)
	decoy := filepath.Join(t.TempDir(), "decoy.sock")
	l, err := net.Listen("unix", decoy)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	for _, sock := range []string{fileVsock, fileAPI} {
		p := filepath.Join(spec.StateDir, dirRun, sock)
		must(t, os.Remove(p))
		must(t, os.Symlink(decoy, p))
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if c, err := vm.DialAgent(sctx); err == nil {
		c.Close()
		t.Error("DialAgent through a planted symlink succeeded")
	}
	if err := vm.(vmm.Pauser).Pause(ctx); err == nil {
		t.Error("Pause through a planted API symlink succeeded")
	} else if !strings.Contains(err.Error(), "refusing") {
		t.Errorf("Pause: %v, want a refusal", err)
	}
	select {
	case <-accepted:
		t.Error("the host connected to the socket a planted symlink named")
	default:
	}
}
