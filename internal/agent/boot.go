package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// BootConfig says how PID 1 turns the initramfs into the sandbox's root.
type BootConfig struct {
	RootDevice string        // default /dev/vda
	RootFSType string        // default ext4
	DeviceWait time.Duration // how long to wait for RootDevice (default 10s)
}

// Modules the guest needs, in dependency order. The first group is required
// for the root disk and the agent port; the rest are loaded when present.
var (
	requiredModules = []string{"virtio_ring", "virtio", "virtio_mmio", "virtio_blk", "virtio_console"}
	optionalModules = []string{
		"virtio_rng", "failover", "net_failover", "virtio_net",
		"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport", "virtio_balloon",
	}
)

// Boot runs as PID 1 in the initramfs: it mounts the kernel filesystems,
// loads the virtio modules, mounts the root disk and switches into it the way
// switch_root does, then mounts what a Linux userland expects and brings
// the loopback up. On return "/" is the sandbox's root filesystem.
func Boot(ctx context.Context, log *slog.Logger, cfg BootConfig) error {
	if cfg.RootDevice == "" {
		cfg.RootDevice = "/dev/vda"
	}
	if cfg.RootFSType == "" {
		cfg.RootFSType = "ext4"
	}
	if cfg.DeviceWait == 0 {
		cfg.DeviceWait = 10 * time.Second
	}
	for _, m := range []struct{ src, dst, typ, opts string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", "mode=0755"},
	} {
		if err := mount(m.src, m.dst, m.typ, 0, m.opts); err != nil {
			return err
		}
	}
	loadModules(log)
	if err := waitFor(ctx, cfg.RootDevice, cfg.DeviceWait); err != nil {
		return err
	}
	if err := mount(cfg.RootDevice, "/newroot", cfg.RootFSType, 0, ""); err != nil {
		return err
	}
	if err := switchRoot("/newroot"); err != nil {
		return err
	}
	if err := mountUserland(log); err != nil {
		return err
	}
	bringUpLoopback(log)
	return nil
}

func mount(src, dst, typ string, flags uintptr, opts string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, typ, flags, opts); err != nil && err != unix.EBUSY {
		return fmt.Errorf("mount %s on %s: %w", typ, dst, err)
	}
	return nil
}

// loadModules loads the modules from /lib/modules/<release> of the
// initramfs. Missing or failing modules are logged: the ones that matter
// show up as a missing device later.
func loadModules(log *slog.Logger) {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	dir := filepath.Join("/lib/modules", unix.ByteSliceToString(uts.Release[:]))
	files := map[string]string{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".ko") {
			files[strings.ReplaceAll(strings.TrimSuffix(d.Name(), ".ko"), "-", "_")] = p
		}
		return nil
	})
	load := func(name string, required bool) {
		if _, err := os.Stat("/sys/module/" + name); err == nil {
			return // built in or already loaded
		}
		p, ok := files[name]
		if !ok {
			if required {
				log.Warn("kernel module not found", "module", name)
			}
			return
		}
		f, err := os.Open(p)
		if err != nil {
			log.Warn("kernel module", "module", name, "err", err)
			return
		}
		defer f.Close()
		if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && err != unix.EEXIST {
			log.Warn("load kernel module", "module", name, "err", err)
		}
	}
	for _, m := range requiredModules {
		load(m, true)
	}
	for _, m := range optionalModules {
		load(m, false)
	}
}

// waitFor polls for a device node the kernel creates asynchronously; there
// is no udev to tell us.
func waitFor(ctx context.Context, path string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %s", path, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// switchRoot moves the kernel mounts into newRoot, frees the initramfs,
// makes newRoot "/" and chroots into it.
func switchRoot(newRoot string) error {
	for _, m := range []string{"/dev", "/proc", "/sys"} {
		dst := filepath.Join(newRoot, m)
		_ = os.MkdirAll(dst, 0o755)
		if err := unix.Mount(m, dst, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move %s: %w", m, err)
		}
	}
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil {
		return err
	}
	// The initramfs is RAM: delete it, except the new root's mount point.
	if d, err := os.Open("/"); err == nil {
		names, _ := d.Readdirnames(-1)
		for _, n := range names {
			if "/"+n == newRoot {
				continue
			}
			var est unix.Stat_t
			if unix.Fstatat(int(d.Fd()), n, &est, unix.AT_SYMLINK_NOFOLLOW) != nil || est.Dev != st.Dev {
				continue
			}
			if est.Mode&unix.S_IFMT == unix.S_IFDIR {
				_ = removeAllAt(int(d.Fd()), n, st.Dev)
			} else {
				_ = unix.Unlinkat(int(d.Fd()), n, 0)
			}
		}
		d.Close()
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return unix.Chdir("/")
}

func mountUserland(log *slog.Logger) error {
	for _, m := range []struct {
		src, dst, typ string
		flags         uintptr
		opts          string
	}{
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "gid=5,mode=620,ptmxmode=666"},
		{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=755"},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	} {
		if err := mount(m.src, m.dst, m.typ, m.flags, m.opts); err != nil {
			log.Warn("mount", "dst", m.dst, "err", err)
		}
	}
	for link, target := range map[string]string{
		"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0",
		"/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, link); err != nil && !errors.Is(err, os.ErrExist) {
			log.Warn("symlink", "link", link, "err", err)
		}
	}
	return nil
}
