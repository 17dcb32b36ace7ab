package firecracker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/jail"
)

const argStandin = "-standin-config="

// jailedRig is a rig whose stand-ins run in the real jail (jailLaunch, as
// production does): the test binary is installed under /usr (all a jail
// sees) for the test's length.
func jailedRig(t *testing.T) *rig {
	r := newRig(t, standinConfig{})
	dir, err := os.MkdirTemp("/usr/local/lib", "space-fc-test-")
	if err != nil {
		t.Skipf("the jailed stand-in must be installed under /usr, which is not writable here: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := os.ReadFile(specFile)
	if err != nil {
		t.Fatal(err)
	}
	r.d.binary = filepath.Join(dir, "firecracker")
	for name, data := range map[string][]byte{"firecracker": self, "spec.yaml": spec} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r.d.launch = func(js jail.Spec, netns *os.File) (*exec.Cmd, jail.State, error) {
		// The stand-in logs into its run dir, the one place it may write.
		cfg, err := json.Marshal(standinConfig{Spec: filepath.Join(dir, "spec.yaml"), Log: jailRun + "/calls.jsonl", Files: js.Files, InJail: true})
		if err != nil {
			return nil, jail.State{}, err
		}
		js.Args = append([]string{js.Args[0], argStandin + string(cfg)}, js.Args[1:]...)
		return jailLaunch(js, netns)
	}
	return r
}

// TestJailedStandin runs the production launch: the stand-in in a real
// jail (its own uid, a pivot_root'ed root holding only /usr, the VM's
// files and the run dir), so the files the driver binds, owns and hands
// over are the ones a jailed Firecracker can use: it binds its sockets
// and opens its log in /run, writes a snapshot there, reads the disk and,
// on a restore, the state copy and the read-only memory file.
func TestJailedStandin(t *testing.T) {
	r := jailedRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := r.spec("vm-jailed")
	vm, err := r.d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopOnCleanup(t, vm)
	if vm.(*VM).Jail().UID < jail.FirstID {
		t.Errorf("vmm uid %d is not a jail's", vm.(*VM).Jail().UID)
	}
	if pid, js, rs, err := RecordedJail(spec.StateDir); err != nil || pid != vm.PID() || js.UID != vm.(*VM).Jail().UID || rs.ID != spec.ID {
		t.Errorf("RecordedJail = %d, %+v, %s, %v", pid, js, rs.ID, err)
	}
	readGreeting(t, vm)
	if err := vm.(*VM).Pause(ctx); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(r.dir, "snap")
	if err := vm.(*VM).Snapshot(ctx, snap); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	r.log = filepath.Join(spec.StateDir, dirRun, "calls.jsonl")
	wantCalls(t, r.calls(), append(bootCalls(""),
		[3]string{"PATCH", "/vm", `{"state":"Paused"}`},
		[3]string{"PUT", "/snapshot/create", `{"snapshot_path":"/run/vmstate.new","mem_file_path":"/run/memory.new","snapshot_type":"Full"}`}))
	if err := vm.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	spec2 := r.spec("vm-jailed-clone")
	copyTestFile(t, spec.MemoryFile, spec2.MemoryFile)
	vm2, err := r.d.Restore(ctx, spec2, snap)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	stopOnCleanup(t, vm2)
	if err := vm2.(*VM).Resume(ctx); err != nil {
		t.Fatal(err)
	}
	readGreeting(t, vm2)
	r.log = filepath.Join(spec2.StateDir, dirRun, "calls.jsonl")
	if n := names(r.calls()); n != "PUT /logger, PUT /snapshot/load, PATCH /vm" {
		t.Errorf("restore calls: %s", n)
	}
	if err := vm2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, spec2.StateDir)

	// A NIC: the jailed VMM runs in the tap's network namespace, where
	// Firecracker opens the tap by name.
	spec3 := r.spec("vm-jailed-nic")
	spec3.Network = testTap(t, "tap0", "02:53:50:00:00:02")
	nic, err := openNIC(spec3)
	if err != nil {
		t.Fatal(err)
	}
	wantNS, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", nic.netns.Fd()))
	nic.close()
	if err != nil {
		t.Fatal(err)
	}
	vm3, err := r.d.Start(ctx, spec3)
	if err != nil {
		t.Fatalf("Start of a VM with a NIC in the jail: %v", err)
	}
	if got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", vm3.PID())); err != nil || got != wantNS {
		t.Errorf("jailed VMM with a NIC in network namespace %s (%v), want the tap's %s", got, err, wantNS)
	}
	if err := vm3.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, spec3.StateDir)
}
