package jail_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/jail"
)

// gateSpec jails a shell that appends a line to a file bound in as /data,
// so the host sees whether the program ran.
func gateSpec(t *testing.T) (jail.Spec, string) {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := os.WriteFile(data, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return jail.Spec{
		Root:   root,
		Files:  []jail.File{{Name: "data", Source: data, Writable: true}},
		Own:    []string{data},
		Path:   "/usr/bin/sh",
		Args:   []string{"sh", "-c", "echo ran >> /data"},
		Limits: jail.Limits{MemoryBytes: 64 << 20, PIDs: 16, CPUs: 0.5, NoFile: 64},
	}, data
}

func ran(t *testing.T, data string) bool {
	t.Helper()
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	return len(b) > 0
}

// The program runs only once Record has returned: a worker that dies
// before it recorded the process can leave no VMM behind.
func TestStartGate(t *testing.T) {
	requireRoot(t)
	t.Run("program waits for Record", func(t *testing.T) {
		spec, data := gateSpec(t)
		spec.Record = func(pid int, start uint64, st jail.State) error {
			if pid <= 0 || start == 0 || st.UID == 0 {
				return fmt.Errorf("record got pid %d start %d uid %d", pid, start, st.UID)
			}
			// Time enough for an ungated program to have run.
			time.Sleep(300 * time.Millisecond)
			if ran(t, data) {
				t.Error("the program ran before Record returned")
			}
			return nil
		}
		j, err := jail.Start(spec)
		if err != nil {
			t.Fatal(err)
		}
		defer j.State.Release()
		waitExit(t, j)
		if !ran(t, data) {
			t.Error("the program did not run after Record")
		}
	})
	t.Run("Record fails: the program never runs", func(t *testing.T) {
		spec, data := gateSpec(t)
		boom := errors.New("disk full")
		spec.Record = func(int, uint64, jail.State) error { return boom }
		j, err := jail.Start(spec)
		if !errors.Is(err, boom) {
			t.Fatalf("Start = %v, %v; want the Record error", j, err)
		}
		time.Sleep(300 * time.Millisecond)
		if ran(t, data) {
			t.Error("the program ran although Record failed")
		}
	})
}

func waitExit(t *testing.T, j *jail.Jail) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- j.Cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		j.State.Kill()
		_ = j.Cmd.Process.Kill()
		t.Fatal("jailed program did not exit")
	}
}

// With NetNS the process runs in that network namespace (Firecracker opens
// its tap by name there); without, in a new one of its own.
func TestNetNS(t *testing.T) {
	requireRoot(t)
	ns, err := netns.New() // also moves this thread: go back at once
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	host, err := netns.GetFromPid(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if err := netns.Set(host); err != nil {
		t.Fatal(err)
	}
	nsFile := os.NewFile(uintptr(ns), "netns")
	for _, tc := range []struct {
		name  string
		netns *os.File
	}{{"joined", nsFile}, {"own", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			spec, _ := gateSpec(t)
			spec.Args = []string{"sh", "-c", "read x <&3"}
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			spec.ExtraFiles = []*os.File{r}
			spec.NetNS = tc.netns
			j, err := jail.Start(spec)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			defer j.State.Release()
			// Until the exec the process is the jail init, which joins the
			// namespace on its way: wait for the program.
			pid := j.Cmd.Process.Pid
			for deadline := time.Now().Add(10 * time.Second); ; {
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				if string(comm) == "sh\n" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the jailed program never started (comm %q)", comm)
				}
				time.Sleep(5 * time.Millisecond)
			}
			got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
			if err != nil {
				t.Fatal(err)
			}
			want, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", int(ns)))
			hostNS, _ := os.Readlink("/proc/self/ns/net")
			switch {
			case tc.netns != nil && got != want:
				t.Errorf("jailed process in %s, want the given %s", got, want)
			case tc.netns == nil && (got == want || got == hostNS):
				t.Errorf("jailed process in %s, want a namespace of its own", got)
			}
			w.Write([]byte("\n"))
			waitExit(t, j)
		})
	}
}

// A device whose group may read and write it (Debian's /dev/kvm: root:kvm
// 0660) opens for the jailed program; one only root may open does not.
func TestDeviceGroup(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	shared, private := filepath.Join(dir, "shared"), filepath.Join(dir, "private")
	for _, d := range []struct {
		path string
		gid  int
		mode uint32
	}{{shared, 4242, 0o660}, {private, 0, 0o600}} {
		if err := unix.Mknod(d.path, unix.S_IFCHR|d.mode, int(unix.Mkdev(1, 3))); err != nil { // like /dev/null
			t.Fatal(err)
		}
		if err := os.Chown(d.path, 0, d.gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d.path, os.FileMode(d.mode)); err != nil {
			t.Fatal(err)
		}
	}
	spec, data := gateSpec(t)
	spec.Devices = []string{shared, private}
	spec.Args = []string{"sh", "-c", fmt.Sprintf("(: > %s) 2>/dev/null && echo shared-ok >> /data; (: > %s) 2>/dev/null && echo private-ok >> /data; echo done >> /data", shared, private)}
	j, err := jail.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer j.State.Release()
	waitExit(t, j)
	b, _ := os.ReadFile(data)
	got := string(b)
	if got != "shared-ok\ndone\n" {
		t.Errorf("jailed program opened: %q, want only the group device", got)
	}
}
