// Package testenv gives tests that boot real sandboxes one way to get what
// they need: root, QEMU, the cached guest kernel, a freshly built static
// space-agent, its initramfs, a reflink data volume with the base template,
// and a leak check. What is missing makes the test skip with a message naming
// it; CI installs all of it (make setup), so nothing skips there.
//
// It is for tests only; no production code imports it.
package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/guest"
	"github.com/space-sandbox/space/internal/storage"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/qemu"
)

// CacheDir holds artifacts shared by test processes (content-addressed, so
// concurrent packages can share it): initramfs images and the accel probe.
var CacheDir = filepath.Join(os.TempDir(), "space-test-cache")

// RequireRoot skips t unless it runs as root; why says what needs it.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root (%s)", why)
	}
}

// pollInterval is how often Eventually asks again.
const pollInterval = 20 * time.Millisecond

// Eventually asks cond until it returns nil, and fails t with cond's last
// error when that takes longer than within. Every wait a test makes for
// something that happens in the background goes through it, so none is
// unbounded and none sleeps longer than it must.
func Eventually(t testing.TB, within time.Duration, cond func() error) {
	t.Helper()
	if err := poll(within, cond); err != nil {
		t.Fatalf("not within %s: %v", within, err)
	}
}

// poll asks cond until it returns nil (poll returns nil) or within passed
// (poll returns cond's last error).
func poll(within time.Duration, cond func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(pollInterval)
	}
}

// RequireVM skips t unless this host can boot sandboxes.
func RequireVM(t testing.TB) {
	t.Helper()
	RequireRoot(t, "loop mounts, VMs")
	if _, err := exec.LookPath(qemu.DefaultBinary); err != nil {
		t.Skipf("needs %s (Debian package qemu-system-x86; run make setup)", qemu.DefaultBinary)
	}
	if _, err := guest.Locate(guest.KernelDirFromEnv()); err != nil {
		t.Skipf("needs the guest kernel: %v", err)
	}
}

// ModuleRoot is the directory holding go.mod.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// AgentBinary builds cmd/space-agent (static) once per test process.
func AgentBinary(t testing.TB) string {
	t.Helper()
	return StaticBinary(t, "./cmd/space-agent")
}

// staticBuild is one package's static binary, built once per test process.
type staticBuild struct {
	once sync.Once
	path string
	err  error
}

var staticBuilds sync.Map // package path → *staticBuild

// StaticBinary builds the module's package pkg ("./cmd/space-agent") as a
// static binary (CGO_ENABLED=0, so it runs in any guest) once per test
// process and returns its path.
func StaticBinary(t testing.TB, pkg string) string {
	t.Helper()
	v, _ := staticBuilds.LoadOrStore(pkg, &staticBuild{})
	b := v.(*staticBuild)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "space-"+filepath.Base(pkg)+"-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-trimpath", "-o", b.path, pkg)
		cmd.Dir = ModuleRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Artifacts are the guest boot artifacts.
type Artifacts struct {
	Kernel guest.Kernel
	Initrd string
	Agent  string
}

// Boot returns the kernel and an initramfs with a freshly built agent.
func Boot(t testing.TB) Artifacts {
	t.Helper()
	RequireVM(t)
	k, err := guest.Locate(guest.KernelDirFromEnv())
	if err != nil {
		t.Fatal(err)
	}
	agent := AgentBinary(t)
	ir, err := guest.BuildInitramfs(context.Background(), k, guest.InitramfsOptions{
		AgentBinary: agent, CacheDir: filepath.Join(CacheDir, "boot"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return Artifacts{Kernel: k, Initrd: ir.Path, Agent: agent}
}

// Driver opens the QEMU driver with accel auto (probe cached in CacheDir).
func Driver(t testing.TB) vmm.Driver {
	t.Helper()
	d, err := vmm.Open(qemu.Name, vmm.Options{Accel: "auto", CacheDir: filepath.Join(CacheDir, "accel")})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Volume is a fresh data dir on a reflink volume with the base template.
type Volume struct {
	Storage      *storage.Store
	DataDir      string
	TemplatesDir string
	Base         template.Metadata
}

// NewVolume makes a data dir under t's temp dir (a loop-mounted btrfs image
// when the temp dir cannot reflink), builds the base template into it, and
// unmounts it in cleanup, then checks that nothing refers to it any more.
func NewVolume(t testing.TB, agent string) Volume {
	t.Helper()
	ctx := context.Background()
	dataDir := filepath.Join(t.TempDir(), "data")
	// Cleanups run last-in first-out: the leak check runs after the unmount
	// and after every VM the test started later was stopped.
	t.Cleanup(func() { CheckNoLeaks(t, dataDir) })
	st, err := storage.Open(ctx, storage.Config{DataDir: dataDir, ImageSizeGiB: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A mount namespace another test process makes meanwhile (a VMM's
		// jail, the Debian template builder) copies this mount as a peer,
		// and the unmount is busy until that copy is gone (CheckNoLeaks
		// below waits for the same reason): ask again, bounded.
		if err := poll(2*time.Minute, func() error { return st.Unmount(context.Background()) }); err != nil {
			t.Errorf("unmount test volume: %v", err)
		}
	})
	templates := filepath.Join(st.Root(), "templates")
	base, err := template.BuildBase(ctx, template.BaseOptions{TemplatesDir: templates, AgentBinary: agent})
	if err != nil {
		t.Fatal(err)
	}
	return Volume{Storage: st, DataDir: dataDir, TemplatesDir: templates, Base: base}
}

// CheckNoLeaks fails t if any process, mount or loop device still refers to
// a path under dir. Call it last (register it first with t.Cleanup).
func CheckNoLeaks(t testing.TB, dir string) {
	t.Helper()
	// Teardown ends asynchronously (a loop device detaches after the last
	// reference to its filesystem goes), and a mount namespace made by
	// another test process meanwhile (the Debian template builder runs
	// mmdebstrap in one) pins this test's mounts until that process ends,
	// which takes seconds. A leak stays; waiting out a pin costs only time.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		leaks := Leaks(dir)
		if len(leaks) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("leaked after test:\n  %s", strings.Join(leaks, "\n  "))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Leaks lists processes (by command line), mounts and loop devices that
// refer to paths under dir.
func Leaks(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	self := fmt.Sprintf("/proc/%d/", os.Getpid())
	for _, p := range procs {
		if strings.HasPrefix(p, self) {
			continue
		}
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), dir) {
			out = append(out, "process "+strings.TrimSuffix(strings.TrimPrefix(p, "/proc/"), "/cmdline")+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, dir) {
				out = append(out, "mount: "+line)
			}
		}
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), dir) {
			out = append(out, "loop device "+f+": "+strings.TrimSpace(string(b)))
		}
	}
	return out
}
