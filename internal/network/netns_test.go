package network

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// freshRunEnv names, in a child test process, the test it runs.
const freshRunEnv = "SPACE_NETWORK_TEST_FRESH_RUN"

// inFreshRun reports whether the calling test runs in the child process
// freshRun starts for it: a mount namespace of its own with an empty tmpfs
// on /run. There `ip netns add` finds /run/netns not yet a mount point, as
// on a freshly booted host, every time; and whatever it mounts stays out of
// the host's /run/netns, which other tests on the host use meanwhile. The
// network namespaces, iproute2 and the kernel are the real ones. Mounts left
// in the child's mount namespace go with it.
func inFreshRun(t *testing.T) bool {
	t.Helper()
	if os.Getenv(freshRunEnv) != t.Name() {
		return false
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
		t.Fatalf("tmpfs on /run: %v", err)
	}
	return true
}

// freshRun runs the calling test again in a child process (see inFreshRun)
// and fails when it fails.
func freshRun(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (ip)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), freshRunEnv+"="+t.Name())
	// Go makes the new mount namespace private before the child runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("in a fresh /run: %v\n%s", err, out)
	}
}

// ipNetns runs `ip netns args...` as an operator or a CNI plugin would.
func ipNetns(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// mountsOf returns the mount points in this mount namespace whose last
// element contains s, hidden ones included.
func mountsOf(t *testing.T, s string) []string {
	t.Helper()
	ms, err := procfs.GetMounts()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		if strings.Contains(filepath.Base(m.MountPoint), s) {
			out = append(out, m.MountPoint)
		}
	}
	return out
}

func mountRoot(t *testing.T, path string) bool {
	t.Helper()
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, 0, &stx); err != nil {
		t.Fatal(err)
	}
	return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

// TestNamespacesSurviveIPNetns makes sandbox namespaces, then has iproute2
// add a namespace of its own (which bind-mounts /run/netns onto itself) and
// delete it again: deleting and re-creating the sandbox namespaces must
// work, nothing of them may stay mounted, and iproute2's namespace must
// work beside them.
func TestNamespacesSurviveIPNetns(t *testing.T) {
	requireNetAdmin(t)
	if !inFreshRun(t) {
		freshRun(t)
		return
	}
	ctx := context.Background()
	m := testManager(t, 1)
	awaitPool(t, m)
	a, err := m.Acquire(ctx, "tnet-ipns-a") // from the pool
	if err != nil {
		t.Fatal(err)
	}
	// a is acquired again below: release whichever it is last.
	t.Cleanup(func() { m.Release(context.Background(), a) })
	b := acquire(t, m, "tnet-ipns-b")

	theirs := fmt.Sprintf("spacetest-%d", os.Getpid())
	ipNetns(t, "add", theirs)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", theirs).Run() })
	if !mountRoot(t, "/run/netns") {
		t.Fatal("ip netns add did not make /run/netns a mount point: the test shows nothing")
	}

	if err := m.Release(ctx, a); err != nil {
		t.Fatalf("release after ip netns add: %v", err)
	}
	if ms := mountsOf(t, a.Name); len(ms) != 0 {
		t.Fatalf("released namespace still mounted: %v", ms)
	}
	a, err = m.Acquire(ctx, "tnet-ipns-a")
	if err != nil {
		t.Fatalf("create again after ip netns add: %v", err)
	}
	for _, sb := range []*Sandbox{a, b} {
		f, err := sb.OpenTap(TapOptions{})
		if err != nil {
			t.Fatalf("%s after ip netns add: %v", sb.Name, err)
		}
		f.Close()
	}
	// Ours did not hide theirs either.
	if !strings.Contains(ipNetns(t, "list"), theirs) {
		t.Fatalf("ip netns list lost %s", theirs)
	}
	ipNetns(t, "exec", theirs, "true")

	ipNetns(t, "del", theirs)
	if ms := mountsOf(t, theirs); len(ms) != 0 {
		t.Fatalf("ip netns del left %v", ms)
	}
	for _, sb := range []*Sandbox{a, b} {
		if err := m.Release(ctx, sb); err != nil {
			t.Fatalf("release after ip netns del: %v", err)
		}
	}
	c, err := m.Acquire(ctx, "tnet-ipns-c")
	if err != nil {
		t.Fatalf("create after ip netns del: %v", err)
	}
	if err := m.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ms := mountsOf(t, NamePrefix+testInstance); len(ms) != 0 {
		t.Fatalf("mounts left: %v", ms)
	}
	if left, _ := ListNamespaces(NamePrefix + testInstance); len(left) != 0 {
		t.Fatalf("namespaces left: %v", left)
	}
}

// oldLayoutNS makes a namespace the way earlier versions did: a file in
// /run/netns that is not a mount point of its own (netns.NewNamed does just
// that), with address mark on its lo to tell it by.
func oldLayoutNS(t *testing.T, name, mark string) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	aerr := func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		a, err := netlink.ParseAddr(mark + "/32")
		if err != nil {
			return err
		}
		return netlink.AddrAdd(lo, a)
	}()
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	if aerr != nil {
		t.Fatal(aerr)
	}
}

// hasAddr reports whether lo of the namespace at path has address mark.
func hasAddr(t *testing.T, path, mark string) bool {
	t.Helper()
	nl := netlinkAt(t, path)
	lo, err := nl.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := nl.AddrList(lo, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(addrs, func(a netlink.Addr) bool { return a.IP.String() == mark })
}

// TestStartReapsOldLayout leaves namespaces as an earlier version did, in
// /run/netns, then lets iproute2 hide them under its bind mount. At start,
// the namespace of a sandbox being adopted moves to the current location
// (the same namespace: its address is there), the orphan is reaped (no mount
// of it left, hidden or not), and another instance's stays.
func TestStartReapsOldLayout(t *testing.T) {
	requireNetAdmin(t)
	if !inFreshRun(t) {
		freshRun(t)
		return
	}
	ctx := context.Background()
	m := testManager(t, -1)
	other := New(ctx, Config{Instance: testInstance + "x", PoolSize: -1})
	t.Cleanup(func() { other.Close(context.Background()) })
	live, dead, foreign := m.NameOf("tnet-old-live"), m.NameOf("tnet-old-dead"), other.NameOf("tnet-old-foreign")
	oldLayoutNS(t, live, "10.250.0.1")
	oldLayoutNS(t, dead, "10.250.0.2")
	oldLayoutNS(t, foreign, "10.250.0.3")

	theirs := fmt.Sprintf("spacetest-%d", os.Getpid())
	ipNetns(t, "add", theirs)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", theirs).Run() })
	if !mountRoot(t, "/run/netns") {
		t.Fatal("ip netns add did not make /run/netns a mount point: the test shows nothing")
	}
	// What the defect left: the name cannot be removed.
	if err := os.Remove(filepath.Join("/run/netns", dead)); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("remove of a hidden old namespace: %v, want EBUSY", err)
	}

	sb, err := m.Adopt(ctx, "tnet-old-live")
	if err != nil {
		t.Fatalf("adopt an old-layout namespace: %v", err)
	}
	t.Cleanup(func() { m.Release(context.Background(), sb) })
	if !hasAddr(t, sb.Path(), "10.250.0.1") {
		t.Fatalf("adopted namespace at %s is not the old one", sb.Path())
	}
	removed, err := m.ReapOrphans(ctx, func(n string) bool { return n == live })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, dead) || slices.Contains(removed, live) || slices.Contains(removed, foreign) {
		t.Fatalf("reaped %v, want %s and neither %s nor %s", removed, dead, live, foreign)
	}
	for _, n := range []string{live, dead} {
		for _, mp := range mountsOf(t, n) {
			if mp != sb.Path() {
				t.Errorf("%s still mounted at %s", n, mp)
			}
		}
		if _, err := os.Lstat(filepath.Join("/run/netns", n)); !os.IsNotExist(err) {
			t.Errorf("old file of %s: %v", n, err)
		}
	}
	if ms := mountsOf(t, foreign); len(ms) == 0 {
		t.Errorf("another instance's namespace %s was reaped", foreign)
	}
	if !strings.Contains(ipNetns(t, "list"), theirs) {
		t.Fatalf("ip netns list lost %s", theirs)
	}
	if err := m.Release(ctx, sb); err != nil {
		t.Fatal(err)
	}
	// The other instance's start reaps its own.
	if removed, err := other.ReapOrphans(ctx, func(string) bool { return false }); err != nil || !slices.Equal(removed, []string{foreign}) {
		t.Fatalf("other instance reaped %v (%v), want %s", removed, err, foreign)
	}
	if ms := mountsOf(t, NamePrefix+testInstance); len(ms) != 0 {
		t.Fatalf("mounts left: %v", ms)
	}
}
