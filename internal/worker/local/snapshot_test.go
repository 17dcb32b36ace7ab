package local_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local"
)

type env struct {
	t   *testing.T
	cfg local.Config
}

func newEnv(t *testing.T) *env {
	testenv.RequireVM(t)
	art := testenv.Boot(t)
	vol := testenv.NewVolume(t, art.Agent)
	level := slog.LevelInfo
	if os.Getenv("SPACE_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return &env{t: t, cfg: local.Config{Storage: vol.Storage, Driver: testenv.Driver(t), Kernel: art.Kernel.Vmlinuz,
		Initrd: art.Initrd, TemplatesDir: vol.TemplatesDir, Logger: log}}
}

// open starts a worker over the env's dirs; cleanup deletes what it holds.
func (e *env) open() *local.Worker {
	e.t.Helper()
	w, err := local.New(context.Background(), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

func cleanupAll(t *testing.T, w *local.Worker) {
	ctx := context.Background()
	sbs, _ := w.Sandboxes(ctx)
	for _, s := range sbs {
		if err := w.DeleteSandbox(ctx, s.ID); err != nil {
			t.Errorf("delete %s: %v", s.ID, err)
		}
	}
	cks, _ := w.Checkpoints(ctx)
	for _, c := range cks {
		_ = w.DeleteCheckpoint(ctx, c.ID)
	}
	w.Close()
}

func spec(id string) worker.SandboxSpec {
	return worker.SandboxSpec{ID: id, Template: "base", VCPUs: 1, MemoryMiB: 256}
}

var cmdSeq atomic.Int64

// sh runs a shell command to its end and returns its exit code.
func sh(t *testing.T, c worker.Guest, script string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := fmt.Sprintf("t%d", cmdSeq.Add(1))
	if _, err := c.Start(ctx, agentproto.ProcessSpec{ID: id, Shell: script}); err != nil {
		t.Fatalf("start %q: %v", script, err)
	}
	for {
		info, err := c.Get(ctx, id)
		if err != nil {
			t.Fatalf("get %q: %v", script, err)
		}
		if info.Exit != nil {
			if info.Exit.ExitCode == nil {
				return -1
			}
			return *info.Exit.ExitCode
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readFile(t *testing.T, c worker.Guest, path string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, _, err := c.ReadFile(ctx, path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func agent(t *testing.T, w *local.Worker, id string) worker.Guest {
	t.Helper()
	c, err := w.Agent(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// counterID is the background counter process started by startCounter.
const counterID = "counter"

// startCounter runs a shell loop that counts in a shell variable (process
// memory) and publishes the count in /tmp/counter.
func startCounter(t *testing.T, c worker.Guest) {
	t.Helper()
	_, err := c.Start(context.Background(), agentproto.ProcessSpec{ID: counterID,
		Shell: `i=0; while true; do i=$((i+1)); echo $i > /tmp/c.tmp; mv /tmp/c.tmp /tmp/counter; sleep 0.05; done`})
	if err != nil {
		t.Fatal(err)
	}
	waitCount(t, c, 1)
}

// count reads the counter; the counter process must still be the one
// started (running, never restarted).
func count(t *testing.T, c worker.Guest) int {
	t.Helper()
	info, err := c.Get(context.Background(), counterID)
	if err != nil {
		t.Fatalf("counter process: %v", err)
	}
	if info.Exit != nil {
		t.Fatalf("counter process ended: %+v", info.Exit)
	}
	b, err := readFile(t, c, "/tmp/counter")
	if err != nil {
		t.Fatalf("read counter: %v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("counter %q: %v", b, err)
	}
	return n
}

// waitCount waits until the counter passes n and returns its value.
func waitCount(t *testing.T, c worker.Guest, n int) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := readFile(t, c, "/tmp/counter")
		if err == nil {
			if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > n {
				return v
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("counter did not pass %d (last %q, %v)", n, b, err)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// writeRandom writes n random bytes to path in the guest and returns their sha256.
func writeRandom(t *testing.T, c worker.Guest, path string, n int) [32]byte {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	if _, err := c.WriteFile(context.Background(), path, 0o644, int64(len(b)), bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func checkFile(t *testing.T, c worker.Guest, path string, want [32]byte) {
	t.Helper()
	b, err := readFile(t, c, path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if sha256.Sum256(b) != want {
		t.Fatalf("%s: checksum mismatch", path)
	}
}

func wantState(t *testing.T, w *local.Worker, id string, state worker.VMState) worker.SandboxStatus {
	t.Helper()
	st, err := w.Sandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != state {
		t.Fatalf("%s: state %s, want %s", id, st.State, state)
	}
	return st
}

// must(f())(t) fails t when f returned an error.
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestLifecycle: ready template snapshot, distinct entropy, pause/wake,
// suspend/wake (also across a worker restart), checkpoint → branch →
// restore, isolation, corruption and a full disk.
func TestLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	w := e.open()
	defer func() { cleanupAll(t, w) }()

	a := must(w.CreateSandbox(ctx, spec("sbx_a")))(t)
	b := must(w.CreateSandbox(ctx, spec("sbx_b")))(t)
	if !a.Restored || !b.Restored {
		t.Fatalf("creates were not restored from the template snapshot: %+v %+v", a, b)
	}
	if a.MemoryBytes <= 0 || a.DiskBytes <= 0 {
		t.Fatalf("usage not reported: %+v", a)
	}
	ca, cb := agent(t, w, "sbx_a"), agent(t, w, "sbx_b")

	t.Run("clones get different entropy", func(t *testing.T) {
		for _, c := range []worker.Guest{ca, cb} {
			if code := sh(t, c, "head -c 32 /dev/urandom > /tmp/rnd && cat /proc/sys/kernel/random/boot_id > /tmp/boot_id"); code != 0 {
				t.Fatalf("exit %d", code)
			}
		}
		for _, f := range []string{"/tmp/rnd", "/tmp/boot_id"} {
			ra, _ := readFile(t, ca, f)
			rb, _ := readFile(t, cb, f)
			if len(ra) == 0 || bytes.Equal(ra, rb) {
				t.Errorf("%s equal in two clones: %x", f, ra)
			}
		}
	})

	startCounter(t, ca)
	data := writeRandom(t, ca, "/root/data", 1<<20)

	t.Run("20 pause/wake cycles", func(t *testing.T) {
		last := count(t, ca)
		for i := range 20 {
			st := must(w.PauseSandbox(ctx, "sbx_a"))(t)
			if st.State != worker.VMPaused {
				t.Fatalf("cycle %d: state %s after pause", i, st.State)
			}
			must(w.WakeSandbox(ctx, "sbx_a"))(t)
			if i%5 == 4 {
				checkFile(t, ca, "/root/data", data)
				last = waitCount(t, ca, last)
			}
		}
		count(t, ca)
	})

	t.Run("5 suspend/wake cycles", func(t *testing.T) {
		for i := range 5 {
			before := count(t, ca)
			st := must(w.SuspendSandbox(ctx, "sbx_a"))(t)
			if st.State != worker.VMSuspended || st.VMMPID != 0 || st.SnapshotBytes <= 0 {
				t.Fatalf("cycle %d: after suspend %+v", i, st)
			}
			must(w.WakeSandbox(ctx, "sbx_a"))(t)
			after := waitCount(t, ca, before)
			if after < before {
				t.Fatalf("cycle %d: counter restarted: %d then %d", i, before, after)
			}
			checkFile(t, ca, "/root/data", data)
		}
	})

	t.Run("suspend, restart the worker, wake", func(t *testing.T) {
		before := count(t, ca)
		must(w.SuspendSandbox(ctx, "sbx_a"))(t)
		w.Close()
		w = e.open()
		wantState(t, w, "sbx_a", worker.VMSuspended)
		wantState(t, w, "sbx_b", worker.VMRunning)
		must(w.WakeSandbox(ctx, "sbx_a"))(t)
		ca, cb = agent(t, w, "sbx_a"), agent(t, w, "sbx_b")
		waitCount(t, ca, before)
		checkFile(t, ca, "/root/data", data)
	})

	t.Run("checkpoint, branch, restore", func(t *testing.T) {
		ck := must(w.Checkpoint(ctx, "sbx_a", "ckpt_1"))(t)
		if ck.SizeBytes <= 0 || ck.Paused <= 0 {
			t.Fatalf("checkpoint %+v", ck)
		}
		wantState(t, w, "sbx_a", worker.VMRunning)
		atCk := count(t, ca)
		writeRandom(t, ca, "/root/after", 1000)

		c := must(w.CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_c", FromCheckpoint: "ckpt_1"}))(t)
		if c.Spec.MemoryMiB != 256 || c.Spec.Template != "base" {
			t.Fatalf("branch spec %+v", c.Spec)
		}
		cc := agent(t, w, "sbx_c")
		// The counter runs on in the branch, from where the checkpoint was.
		v := waitCount(t, cc, atCk-1)
		if v+1 < atCk-20 {
			t.Fatalf("branch counter %d, checkpoint at %d", v, atCk)
		}
		checkFile(t, cc, "/root/data", data)
		if _, err := readFile(t, cc, "/root/after"); err == nil {
			t.Fatal("branch sees a file its parent wrote after the checkpoint")
		}
		branchOnly := writeRandom(t, cc, "/root/branch", 1000)
		if _, err := readFile(t, ca, "/root/branch"); err == nil {
			t.Fatal("parent sees the branch's file")
		}
		d := must(w.CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_d", FromCheckpoint: "ckpt_1"}))(t)
		_ = d
		if _, err := readFile(t, agent(t, w, "sbx_d"), "/root/branch"); err == nil {
			t.Fatal("one branch sees another's file")
		}

		// Deleting the checkpoint does not break its branches.
		if err := w.DeleteCheckpoint(ctx, "ckpt_1"); err != nil {
			t.Fatal(err)
		}
		checkFile(t, cc, "/root/branch", branchOnly)
		must(w.SuspendSandbox(ctx, "sbx_c"))(t)
		must(w.WakeSandbox(ctx, "sbx_c"))(t)
		checkFile(t, cc, "/root/branch", branchOnly)
		if err := w.DeleteSandbox(ctx, "sbx_d"); err != nil {
			t.Fatal(err)
		}

		// Restore in place rolls the parent back.
		ck2 := count(t, ca) // a lower bound of the count at the checkpoint
		must(w.Checkpoint(ctx, "sbx_a", "ckpt_2"))(t)
		writeRandom(t, ca, "/root/later", 1000)
		pre := waitCount(t, ca, ck2+60)
		must(w.RestoreCheckpoint(ctx, "sbx_a", "ckpt_2"))(t)
		if _, err := readFile(t, ca, "/root/later"); err == nil {
			t.Fatal("restore kept a file written after the checkpoint")
		}
		// The counter goes on from the checkpoint's value, not from where
		// it was before the restore.
		if v := count(t, ca); v >= pre || v < ck2 {
			t.Fatalf("counter after restore %d: checkpoint at %d, %d before the restore", v, ck2, pre)
		}
		checkFile(t, ca, "/root/data", data)
	})

	t.Run("corrupt snapshots are data loss", func(t *testing.T) {
		must(w.Checkpoint(ctx, "sbx_b", "ckpt_bad"))(t)
		corrupt(t, filepath.Join(e.cfg.Storage.Root(), "checkpoints", "ckpt_bad", "memory"))
		_, err := w.CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_e", FromCheckpoint: "ckpt_bad"})
		if !errors.Is(err, errdefs.ErrDataLoss) {
			t.Fatalf("branch of a corrupt checkpoint: %v, want data_loss", err)
		}
		if _, err := w.Sandbox(ctx, "sbx_e"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("failed branch left a sandbox: %v", err)
		}
		must(w.SuspendSandbox(ctx, "sbx_b"))(t)
		corrupt(t, filepath.Join(e.cfg.Storage.Root(), "sandboxes", "sbx_b", "suspend", "rootfs.ext4"))
		_, err = w.WakeSandbox(ctx, "sbx_b")
		if !errors.Is(err, errdefs.ErrDataLoss) {
			t.Fatalf("wake of a corrupt snapshot: %v, want data_loss", err)
		}
		if st := wantState(t, w, "sbx_b", worker.VMSuspended); st.VMMPID != 0 {
			t.Fatalf("a VM runs after a failed wake: %+v", st)
		}
	})

	t.Run("disk full during suspend and checkpoint", func(t *testing.T) {
		filler := filepath.Join(e.cfg.Storage.Root(), "filler")
		f, err := os.Create(filler)
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(filler)
		// Leave less than a snapshot's margin. btrfs releases the extents of
		// files earlier subtests deleted lazily, so free space can still grow
		// after a first fill: top the filler up until it stays below.
		var size int64
		for tries := 0; ; tries++ {
			unix.Sync() // commits the deletions, so free space settles
			free, err := e.cfg.Storage.Free(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if free < 32<<20 {
				break
			}
			if tries == 50 {
				t.Fatalf("the volume keeps %d bytes free after filling", free)
			}
			size += free - 16<<20
			if err := fallocate(f, size); err != nil {
				t.Skipf("cannot fill the volume: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		f.Close()
		_, err = w.SuspendSandbox(ctx, "sbx_a")
		if !errors.Is(err, errdefs.ErrResourceExhausted) {
			t.Fatalf("suspend on a full disk: %v, want resource_exhausted", err)
		}
		wantState(t, w, "sbx_a", worker.VMRunning)
		if _, err := os.Stat(filepath.Join(e.cfg.Storage.Root(), "sandboxes", "sbx_a", "suspend")); err == nil {
			t.Fatal("a partial suspend snapshot remains")
		}
		// A checkpoint on the full disk fails the same way, leaves no
		// files, and does not leave the sandbox paused.
		if _, err := w.Checkpoint(ctx, "sbx_a", "ckpt_full"); !errors.Is(err, errdefs.ErrResourceExhausted) {
			t.Fatalf("checkpoint on a full disk: %v, want resource_exhausted", err)
		}
		wantState(t, w, "sbx_a", worker.VMRunning)
		if left, _ := filepath.Glob(filepath.Join(e.cfg.Storage.Root(), "checkpoints", "ckpt_full*")); len(left) > 0 {
			t.Fatalf("a partial checkpoint remains: %v", left)
		}
		if _, err := os.Stat(filepath.Join(e.cfg.Storage.Root(), "sandboxes", "sbx_a", "transient.json")); err == nil {
			t.Fatal("the failed checkpoint left its in-progress marker")
		}
		os.Remove(filler)
		before := count(t, ca)
		waitCount(t, ca, before)
		if code := sh(t, ca, "echo ok > /root/writable"); code != 0 {
			t.Fatalf("guest filesystem not writable after the failed suspend: exit %d", code)
		}
	})
}

func corrupt(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 4096); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, 4096); err != nil {
		t.Fatal(err)
	}
}
