package firecracker

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
)

// TestJailSpec: what the real VMM's jail holds (the stand-in tests run
// with this same spec, but not in a jail).
func TestJailSpec(t *testing.T) {
	r := newRig(t, standinConfig{})
	spec := r.spec("vm-jail")
	spec.Network = &vmm.Network{MAC: "02:53:50:00:00:02"}
	ro := spec.Initrd // any world-readable file serves as a shared image
	spec.Disks = append(spec.Disks, vmm.Disk{Path: ro, ReadOnly: true})
	js, err := r.d.jailSpec(spec, true, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []jail.File{
		{Name: "vmlinux", Source: spec.Kernel},
		{Name: "run", Source: spec.StateDir + "/run", Writable: true},
		{Name: "initrd", Source: spec.Initrd},
		{Name: "disk0", Source: spec.Disks[0].Path, Writable: true},
		{Name: "disk1", Source: ro},
		{Name: "memory", Source: spec.MemoryFile},
	}
	if !reflect.DeepEqual(js.Files, wantFiles) {
		t.Errorf("files = %+v\nwant %+v", js.Files, wantFiles)
	}
	if want := []string{"/dev/kvm", "/dev/net/tun"}; !reflect.DeepEqual(js.Devices, want) {
		t.Errorf("devices = %v, want %v", js.Devices, want)
	}
	// The VMM's uid gets the files it writes, and the memory file it maps
	// (read-only) for a restore; never the shared read-only image.
	if want := []string{spec.Disks[0].Path, spec.MemoryFile}; !reflect.DeepEqual(js.Own, want) {
		t.Errorf("own = %v, want %v", js.Own, want)
	}
	if got := strings.Join(js.Args[1:], " "); got != "--api-sock /run/api.sock --id vm-jail" {
		t.Errorf("args = %q", got)
	}
	if !strings.HasPrefix(js.Args[0], spec.StateDir+"/") || js.Path != "/usr/bin/true" {
		t.Errorf("argv0 %q, path %q", js.Args[0], js.Path)
	}
	if l := js.Limits; l.MemoryBytes != int64(128+vmmOverheadMiB)<<20 || l.CPUs != 2.5 {
		t.Errorf("limits = %+v", l)
	}
	if js, _ := r.d.jailSpec(r.spec("vm-boot"), false, nil, nil); len(js.Files) != 4 {
		t.Errorf("a cold boot binds %d files, want 4 (no memory file)", len(js.Files))
	}

	// A shared file the VMM's uid cannot read is refused up front.
	if err := os.Chmod(ro, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.d.jailSpec(spec, false, nil, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("jailSpec with an unreadable shared image = %v, want failed_precondition", err)
	}
	if id := instanceID(strings.Repeat("sbx_é", 20)); len(id) != 64 || strings.ContainsAny(id, "_é") {
		t.Errorf("instanceID = %q", id)
	}
}

// TestRunDir: before the VMM's uid is known its run dir takes anyone's
// files but lets no one remove another's (sticky); then it is the uid's.
func TestRunDir(t *testing.T) {
	dir := t.TempDir()
	run, err := makeRunDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	st, err := os.Stat(dir + "/run")
	if err != nil || st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o733 {
		t.Fatalf("run dir mode %v, %v; want sticky 0733", st.Mode(), err)
	}
	if err := giveRunDir(run, 4242); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir + "/run"} {
		st, _ := os.Stat(p)
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 4242 || st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: uid %d mode %v, want 4242 and private", p, sys.Uid, st.Mode())
		}
	}
}
