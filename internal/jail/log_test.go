package jail_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/jail"
)

// TestLogsBoundedWithoutReader: a jailed program writes far more than a
// log keeps into its stdout, its stderr and a FIFO it opens by path, as a
// VMM does with a flooding guest's console and its own messages. Nothing
// in the test process reads or rotates anything; at every moment and at
// the end each log is at most its bound (live and old part each), and its
// tail is the end of what was written.
func TestLogsBoundedWithoutReader(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	run := filepath.Join(dir, "run")
	for _, d := range []string{root, run} {
		must(t, os.Mkdir(d, 0o755))
	}
	runDir, err := jail.OpenDir(run)
	must(t, err)
	defer runDir.Close()
	const keep = 16 << 10
	out, err := jail.NewLog(filepath.Join(dir, "console.log"), keep)
	must(t, err)
	defer out.Close()
	errs, err := jail.NewLog(filepath.Join(dir, "vmm.log"), keep)
	must(t, err)
	defer errs.Close()
	fifo, err := jail.NewFIFOLog(runDir, "fifo.log", filepath.Join(dir, "fifo.log"), keep)
	must(t, err)
	defer fifo.Close()
	// 4 MiB into each, 256 times the bound, then a last line.
	flood := "head -c 4194304 /dev/zero | tr '\\0' x; echo; echo LAST LINE"
	j, err := jail.Start(jail.Spec{
		Root:   root,
		Files:  []jail.File{{Name: "run", Source: run, Writable: true}},
		Path:   "/usr/bin/sh",
		Args:   []string{"sh", "-c", "(" + flood + ") & (" + flood + ") >&2 & (" + flood + ") > /run/fifo.log & wait"},
		Stdout: out.Writer(), Stderr: errs.Writer(),
		Logs:   []*jail.Log{out, errs, fifo},
		Limits: jail.Limits{MemoryBytes: 64 << 20, PIDs: 16, CPUs: 1},
	})
	must(t, err)
	out.Close()
	errs.Close()
	fifo.Close()
	defer j.State.Release()
	files := []string{"console.log", "console.old.log", "vmm.log", "vmm.old.log", "fifo.log", "fifo.old.log"}
	exited := make(chan error, 1)
	go func() { exited <- j.Cmd.Wait() }()
	check := func() {
		for _, f := range files {
			if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() > keep {
				t.Fatalf("%s: %d bytes (%v), want at most %d", f, st.Size(), err, keep)
			}
		}
	}
	deadline := time.After(2 * time.Minute)
	for waiting := true; waiting; {
		check()
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("flooding shell: %v", err)
			}
			waiting = false
		case <-deadline:
			j.State.Kill()
			t.Fatal("flooding shell did not finish")
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case <-j.LogsDone:
	case <-time.After(time.Minute):
		t.Fatal("log copier did not end after its program")
	}
	check()
	for _, l := range []string{"console.log", "vmm.log", "fifo.log"} {
		if st, err := os.Stat(jail.OldLogPath(filepath.Join(dir, l))); err != nil || st.Size() == 0 {
			t.Errorf("%s never rotated (%v)", l, err)
		}
		b := jail.ReadLog(filepath.Join(dir, l), keep)
		if !strings.HasSuffix(string(b), "xxxx\nLAST LINE\n") {
			t.Errorf("%s ends %q", l, b[max(len(b)-40, 0):])
		}
	}
}

// TestReleaseEndsLogCopier: once its program is gone, Release leaves no
// log copier behind, also one that cannot see the end of its pipe (here a
// write end the test keeps open, as a process outside the jail could):
// the copier holds the log files open, and a volume with a file held open
// cannot be unmounted.
func TestReleaseEndsLogCopier(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	must(t, os.Mkdir(root, 0o755))
	out, err := jail.NewLog(filepath.Join(dir, "console.log"), 16<<10)
	must(t, err)
	defer out.Close()
	held, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(out.Writer().Fd())), os.O_WRONLY, 0)
	must(t, err)
	defer held.Close()
	j, err := jail.Start(jail.Spec{
		Root: root, Path: "/usr/bin/true", Args: []string{"true"},
		Stdout: out.Writer(), Logs: []*jail.Log{out},
		Limits: jail.Limits{MemoryBytes: 64 << 20, PIDs: 16, CPUs: 1},
	})
	must(t, err)
	out.Close()
	if err := j.Cmd.Wait(); err != nil {
		t.Fatalf("jailed true: %v", err)
	}
	copier := j.State.LogCopier
	if copier == nil || copier.PID <= 0 {
		t.Fatalf("the jail's state names no log copier: %+v", j.State)
	}
	if !jail.Alive(copier.PID, copier.StartTime) {
		t.Fatal("the copier ended although a write end of its pipe is open")
	}
	j.State.Release()
	select {
	case <-j.LogsDone:
	case <-time.After(10 * time.Second):
		t.Fatalf("log copier %d still runs after Release", copier.PID)
	}
}
