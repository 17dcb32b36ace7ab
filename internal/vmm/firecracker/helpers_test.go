package firecracker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
)

func TestMain(m *testing.M) {
	if raw := os.Getenv(envStandin); raw != "" {
		runStandin(raw)
		return
	}
	// In a real jail the environment is the jail's own: the config comes
	// as the first argument instead.
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], argStandin) {
		raw := strings.TrimPrefix(os.Args[1], argStandin)
		os.Args = append(os.Args[:1], os.Args[2:]...)
		runStandin(raw)
		return
	}
	os.Exit(m.Run())
}

// rig is one test's driver on the stand-in, and the files of its VMs.
type rig struct {
	t   *testing.T
	d   *Driver
	log string
	dir string
}

// newRig makes a driver whose VMMs are stand-ins configured by cfg.
func newRig(t *testing.T, cfg standinConfig) *rig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the driver's tests need root (they chown files to the VMM and make a network namespace)")
	}
	spec, err := filepath.Abs(specFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg.Spec, cfg.Log = spec, filepath.Join(dir, "calls.jsonl")
	// The binary only has to be under /usr: the stand-in replaces it.
	d, err := New(vmm.Options{Binary: "/usr/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	d.launch = standinLaunch(t, cfg)
	return &rig{t: t, d: d, log: cfg.Log, dir: dir}
}

// calls is what the stand-ins of this rig were asked, without the GET /
// polls of the driver waiting for the API. It fails the test on any
// request the spec does not allow.
func (r *rig) calls() []call {
	r.t.Helper()
	var out []call
	for _, c := range readCalls(r.t, r.log) {
		if c.Violation != "" {
			r.t.Errorf("spec violation: %s %s %s: %s", c.Method, c.Path, c.Body, c.Violation)
		}
		if c.Method == "GET" && c.Path == "/" {
			continue
		}
		out = append(out, c)
	}
	return out
}

// spec is a BootSpec with a fake ELF kernel, an initramfs and a disk.
func (r *rig) spec(id string) vmm.BootSpec {
	r.t.Helper()
	files := filepath.Join(r.dir, id)
	if err := os.MkdirAll(files, 0o755); err != nil {
		r.t.Fatal(err)
	}
	write := func(name string, data []byte, mode os.FileMode) string {
		p := filepath.Join(files, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			r.t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			r.t.Fatal(err)
		}
		return p
	}
	state := filepath.Join(files, "vm")
	if err := os.Mkdir(state, 0o700); err != nil {
		r.t.Fatal(err)
	}
	return vmm.BootSpec{
		ID:         id,
		StateDir:   state,
		Kernel:     write("vmlinux", []byte("\x7fELF\x02\x01\x01 fake kernel"), 0o644),
		Initrd:     write("initrd", []byte("070701 fake initramfs"), 0o644),
		Cmdline:    "quiet",
		Disks:      []vmm.Disk{{Path: write("disk", make([]byte, 4096), 0o600)}},
		VCPUs:      2,
		MemoryMiB:  128,
		MemoryFile: filepath.Join(files, "memory"),
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// stopOnCleanup stops vm when the test ends and checks its process is gone.
func stopOnCleanup(t *testing.T, vm vmm.VM) {
	t.Cleanup(func() {
		if err := vm.Stop(context.Background()); err != nil {
			t.Errorf("cleanup Stop: %v", err)
		}
		assertGone(t, vm.PID())
	})
}

func assertGone(t *testing.T, pid int) {
	t.Helper()
	// A zombie has exited: an adopted VM's Stop sees the exit through a
	// pidfd, and the first VM's Wait (this process is the stand-in's
	// parent) may not have reaped it yet.
	if _, err := jail.StartTime(pid); err == nil {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		t.Errorf("vmm %d still runs: %s", pid, b)
	}
}

// assertEmpty checks that the driver left nothing in a VM's state dir.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	es, _ := os.ReadDir(dir)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	if len(names) > 0 {
		t.Errorf("state dir not empty: %v", names)
	}
}

// testTap makes a network namespace with a persistent tap called name and
// returns a vmm.Network whose Tap opens it from there (as the worker's
// does). The namespace (and the tap) go when the test ends.
func testTap(t *testing.T, name, mac string) *vmm.Network {
	t.Helper()
	nsPath := filepath.Join(t.TempDir(), "netns")
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread stays in the new namespace and dies with it
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		if err := os.WriteFile(nsPath, nil, 0o600); err != nil {
			errc <- err
			return
		}
		if err := unix.Mount("/proc/thread-self/ns/net", nsPath, "", unix.MS_BIND, ""); err != nil {
			errc <- err
			return
		}
		fd, err := openTun(name)
		if err == nil {
			_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETPERSIST, 1)
			if errno != 0 {
				err = errno
			}
			unix.Close(fd)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("test tap: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(nsPath, unix.MNT_DETACH) })
	return &vmm.Network{MAC: mac, Tap: func() (*os.File, error) {
		type res struct {
			f   *os.File
			err error
		}
		ch := make(chan res, 1)
		go func() {
			runtime.LockOSThread()
			ns, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				ch <- res{nil, err}
				return
			}
			defer unix.Close(ns)
			if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
				ch <- res{nil, err}
				return
			}
			fd, err := openTun(name)
			if err != nil {
				ch <- res{nil, err}
				return
			}
			ch <- res{os.NewFile(uintptr(fd), name), nil}
		}()
		r := <-ch
		return r.f, r.err
	}}
}

func openTun(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:unix.IFNAMSIZ-1], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TAP | unix.IFF_NO_PI
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); errno != 0 {
		unix.Close(fd)
		return -1, errno
	}
	return fd, nil
}

// jsonEq reports whether raw is the JSON of want.
func jsonEq(t *testing.T, raw json.RawMessage, want string) bool {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(raw, &a); err != nil {
		return false
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func names(calls []call) string {
	var s []string
	for _, c := range calls {
		s = append(s, c.String())
	}
	return strings.Join(s, ", ")
}
