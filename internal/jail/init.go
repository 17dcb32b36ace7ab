package jail

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The jail init: the re-executed binary, running as root in the new mount,
// network, IPC and UTS namespaces Start gave it. It never returns to the
// program it is part of: it executes the VMM or exits 125.
func init() {
	if len(os.Args) < 1 || os.Args[0] != initArg0 || os.Getenv(envConfig) == "" {
		return
	}
	// Capabilities and no_new_privs are per thread: the thread that sets
	// them must be the one that calls execve.
	runtime.LockOSThread()
	var c config
	if err := json.Unmarshal([]byte(os.Getenv(envConfig)), &c); err != nil {
		fmt.Fprintf(os.Stderr, "jail: bad config: %v\n", err)
		os.Exit(125)
	}
	if err := enter(c); err != nil {
		fmt.Fprintf(os.Stderr, "jail: %v\n", err)
		os.Exit(125)
	}
}

// enter builds the jail around the calling process and executes c.Path.
func enter(c config) error {
	pid := []byte(strconv.Itoa(os.Getpid()))
	errs := make(chan error, len(c.Cgroups))
	for _, d := range c.Cgroups {
		go func() { errs <- os.WriteFile(filepath.Join(d, "cgroup.procs"), pid, 0) }()
	}
	for range c.Cgroups {
		if err := <-errs; err != nil {
			return fmt.Errorf("join cgroup: %v", err)
		}
	}
	if c.NetNSFD > 0 {
		if err := unix.Setns(c.NetNSFD, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("join network namespace: %v", err)
		}
		unix.Close(c.NetNSFD)
	}
	// Nothing mounted here may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %v", err)
	}
	lastCap, err := readLastCap()
	if err != nil {
		return err
	}

	// Open every source before the root tmpfs hides anything, and bind
	// them through their fds, so no later path lookup can be redirected.
	type bind struct {
		fd       int
		dst      string
		dir      bool
		writable bool
		dev      bool // device nodes work (no nodev)
		exec     bool // programs and libraries (no noexec)
	}
	var binds []bind
	add := func(src, dst string, writable, dev bool) error {
		fd, err := unix.Open(src, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %v", filepath.Base(src), err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		binds = append(binds, bind{fd: fd, dst: dst, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR, writable: writable, dev: dev})
		return nil
	}
	if err := add("/usr", "usr", false, false); err != nil {
		return err
	}
	binds[0].exec = true
	for _, d := range []string{"null", "zero", "urandom"} {
		if err := add("/dev/"+d, "dev/"+d, true, true); err != nil {
			return err
		}
	}
	for _, d := range c.Devices {
		if err := add(d, strings.TrimPrefix(filepath.Clean(d), "/"), true, true); err != nil {
			return err
		}
	}
	for _, f := range c.Files {
		if err := add(f.Source, f.Name, f.Writable, false); err != nil {
			return err
		}
	}
	// Merged /usr (Debian 12): /lib, /lib64, /bin are links into it.
	var links [][2]string
	for _, l := range []string{"lib", "lib64", "lib32", "libx32", "bin", "sbin"} {
		if t, err := os.Readlink("/" + l); err == nil {
			links = append(links, [2]string{t, l})
		} else if st, err := os.Stat("/" + l); err == nil && st.IsDir() {
			if err := add("/"+l, l, false, false); err != nil {
				return err
			}
			binds[len(binds)-1].exec = true
		}
	}

	root := c.Root
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,nr_inodes=256,mode=0755"); err != nil {
		return fmt.Errorf("mount root: %v", err)
	}
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		return err
	}
	for _, b := range binds {
		dst := filepath.Join(root, b.dst)
		if b.dir {
			err = os.MkdirAll(dst, 0o755)
		} else if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil { // dev/net/tun
			err = os.WriteFile(dst, nil, 0o600)
		}
		if err != nil {
			return fmt.Errorf("mount point %s: %v", b.dst, err)
		}
		src := "/proc/self/fd/" + strconv.Itoa(b.fd)
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %v", b.dst, err)
		}
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID)
		if !b.writable {
			flags |= unix.MS_RDONLY
		}
		if !b.dev {
			flags |= unix.MS_NODEV
		}
		if !b.exec {
			flags |= unix.MS_NOEXEC
		}
		if err := unix.Mount("", dst, "", flags, ""); err != nil {
			return fmt.Errorf("remount %s: %v", b.dst, err)
		}
		unix.Close(b.fd)
	}
	for _, l := range links {
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			return err
		}
	}
	if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("remount root read-only: %v", err)
	}
	// pivot_root(".", ".") stacks the old root on the new one; detaching
	// it leaves nothing of the host's mounts in this namespace.
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %v", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %v", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	_ = unix.Sethostname([]byte("vmm"))

	for _, r := range []struct {
		res int
		v   uint64
	}{{unix.RLIMIT_CORE, 0}, {unix.RLIMIT_NOFILE, c.NoFile}} {
		if err := unix.Setrlimit(r.res, &unix.Rlimit{Cur: r.v, Max: r.v}); err != nil {
			return fmt.Errorf("rlimit %d: %v", r.res, err)
		}
	}
	for cp := 0; cp <= lastCap; cp++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(cp), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d: %v", cp, err)
		}
	}
	// Only this thread's credentials change (raw syscalls, not the
	// syscall package's all-threads versions, which stop the world three
	// times): execve runs on this thread and ends every other one, which
	// only ever ran the Go runtime.
	for _, sc := range []struct {
		name   string
		trap   uintptr
		a1, a2 uintptr
		a3     uintptr
	}{
		{"setgroups", unix.SYS_SETGROUPS, uintptr(len(c.Groups)), groupsPtr(c.Groups), 0},
		{"setresgid", unix.SYS_SETRESGID, uintptr(c.UID), uintptr(c.UID), uintptr(c.UID)},
		// Leaving uid 0 clears the permitted, effective and ambient sets.
		{"setresuid", unix.SYS_SETRESUID, uintptr(c.UID), uintptr(c.UID), uintptr(c.UID)},
	} {
		if _, _, errno := unix.RawSyscall(sc.trap, sc.a1, sc.a2, sc.a3); errno != 0 {
			return fmt.Errorf("%s: %v", sc.name, errno)
		}
	}
	runtime.KeepAlive(c.Groups)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %v", err)
	}
	// The jail is built; the program runs only once the caller has
	// recorded this process (jail.Spec.Record) and opened the gate.
	var b [1]byte
	if n, _ := unix.Read(c.GateFD, b[:]); n != 1 {
		return fmt.Errorf("the starting worker is gone before it recorded this process")
	}
	unix.Close(c.GateFD)
	err = syscall.Exec(c.Path, c.Args, []string{"PATH=/usr/bin"})
	return fmt.Errorf("exec %s: %v", filepath.Base(c.Path), err)
}

func readLastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("cap_last_cap: %v", err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// groupsPtr is the address of gids for setgroups(2) (0 for none).
func groupsPtr(gids []uint32) uintptr {
	if len(gids) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&gids[0]))
}
