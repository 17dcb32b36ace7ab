package jail_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/jail/jailtest"
)

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, cgroups)")
	}
}

// TestJailedProcess jails a shell that waits on its stdin and checks it
// from the host, then that Release leaves nothing.
func TestJailedProcess(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	other := filepath.Join(dir, "other")
	for _, d := range []string{root, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	if err := os.WriteFile(data, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	in, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	out, err := os.CreateTemp(dir, "out")
	if err != nil {
		t.Fatal(err)
	}
	want := jail.Limits{MemoryBytes: 64 << 20, PIDs: 16, CPUs: 0.5, IOWeight: 50, NoFile: 128}
	j, err := jail.Start(jail.Spec{
		Root:  root,
		Files: []jail.File{{Name: "data", Source: data, Writable: true}},
		Own:   []string{data},
		Path:  "/usr/bin/sh",
		// Prints what it sees of its root, tries to write where it must
		// not, then waits for fd 3 to say stop.
		Args: []string{"sh", "-c", "echo /*; cat /data; echo; " +
			"touch /x 2>/dev/null && echo ROOT-WRITABLE; touch /usr/x 2>/dev/null && echo USR-WRITABLE; " +
			"echo more >> /data || echo DATA-READONLY; read x <&3; exit 3"},
		ExtraFiles: []*os.File{in},
		Stdout:     out, Stderr: out,
		Limits: want,
	})
	in.Close()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- j.Cmd.Wait() }()
	pid := j.Cmd.Process.Pid
	// Until the exec the process is the jail init, still root.
	deadline := time.Now().Add(10 * time.Second)
	for jailtest.Verify(pid, j.State, want, false, other, dir) != nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	jailtest.Check(t, pid, j.State, want, false, other, dir)
	if st, err := os.Stat(data); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("owned file: %v %v", st.Mode(), err)
	}

	_, _ = w.Write([]byte("\n"))
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "exit status 3") {
			t.Errorf("jailed shell ended with %v, want exit status 3", err)
		}
	case <-time.After(10 * time.Second):
		j.State.Kill()
		t.Fatal("jailed shell did not exit")
	}
	b, _ := os.ReadFile(out.Name())
	got := string(b)
	if !strings.Contains(got, "/bin /data /dev /lib /lib64 /sbin /usr") || !strings.Contains(got, "mine") {
		t.Errorf("jailed shell saw %q", got)
	}
	for _, bad := range []string{"ROOT-WRITABLE", "USR-WRITABLE", "DATA-READONLY"} {
		if strings.Contains(got, bad) {
			t.Errorf("jailed shell: %s (%q)", bad, got)
		}
	}
	if d, _ := os.ReadFile(data); string(d) != "minemore\n" {
		t.Errorf("writable file holds %q", d)
	}
	j.State.Release()
	for _, d := range j.State.Cgroups {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left after Release: %v", d, err)
		}
	}
	// The id is free again: the sweep of a later worker has nothing to do.
	if jail.InUse(j.State.UID) {
		t.Errorf("id %d still reserved after Release", j.State.UID)
	}
}

// BenchmarkStart is what a jail adds to starting a VMM: re-executing the
// binary, the namespaces, mounts, cgroups and id, then /usr/bin/true;
// BenchmarkPlainExec is the same program started directly.
func BenchmarkStart(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	root := b.TempDir()
	file := filepath.Join(root, "..", "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		j, err := jail.Start(jail.Spec{
			Root: root, Files: []jail.File{{Name: "f", Source: file, Writable: true}}, Own: []string{file},
			Path: "/usr/bin/true", Args: []string{"true"},
			Limits: jail.Limits{MemoryBytes: 64 << 20, PIDs: 8, CPUs: 1},
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Cmd.Wait(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer() // the release is part of Stop, not of a start
		j.State.Release()
		b.StartTimer()
	}
}

func BenchmarkPlainExec(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/usr/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSweep: a jail whose process died while nobody watched (its worker
// crashed) is released by the next Sweep; a live one is left alone.
func TestSweep(t *testing.T) {
	requireRoot(t)
	start := func(args ...string) *jail.Jail {
		j, err := jail.Start(jail.Spec{Root: t.TempDir(), Path: "/usr/bin/sh", Args: append([]string{"sh", "-c"}, args...),
			Limits: jail.Limits{MemoryBytes: 64 << 20, PIDs: 8, CPUs: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	dead := start("exit 0")
	if err := dead.Cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	live := start("sleep 60")
	t.Cleanup(func() {
		// It may not have joined its cgroups yet: kill it by pid too.
		_ = live.Cmd.Process.Kill()
		live.State.Kill()
		_ = live.Cmd.Wait()
		live.State.Release()
	})
	jail.Sweep()
	if jail.InUse(dead.State.UID) {
		t.Errorf("dead jail's id %d not swept", dead.State.UID)
	}
	for _, d := range dead.State.Cgroups {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("dead jail's cgroup %s not swept (%v)", d, err)
		}
	}
	if !jail.InUse(live.State.UID) {
		t.Errorf("live jail's id %d swept", live.State.UID)
	}
	for _, d := range live.State.Cgroups {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("live jail's cgroup %s swept (%v)", d, err)
		}
	}
}
