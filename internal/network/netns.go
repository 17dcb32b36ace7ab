package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/prometheus/procfs"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// nsDir is where sandbox namespaces are bind-mounted, one file per name.
//
// It is a directory of our own rather than iproute2's /run/netns, which every
// other tool on the host shares: `ip netns add` (and CNI plugins doing the
// same) turns /run/netns into a recursive bind mount of itself when it is not
// yet a mount point, which hides every namespace mounted in it before (the
// unmount then finds only a copy, the file stays busy, and its name stays
// taken for good), and `ip -all netns delete` removes whatever is in it. No
// other tool mounts in or over /run/space/netns.
//
// ensureDir makes it a mount point of its own before the first namespace is
// mounted in it, so nothing made later over its parent can hide ours. Its
// propagation is first made private, to leave the peer group of its parent
// (on a host whose /run is a shared mount, namespace mounts would otherwise
// be copied under the directory into /run itself, hidden), and then shared, a
// peer group of its own: a mount namespace cloned from the worker's later (a
// jail, `unshare -m`) gets its copies as peers and loses them when the worker
// unmounts, so no copy keeps a deleted sandbox's namespace alive.
const nsDir = "/run/space/netns"

// maxLayers bounds the loops that peel stacked mounts off one path.
const maxLayers = 16

// NamespacePath is the bind-mounted file of the named namespace name.
func NamespacePath(name string) string { return filepath.Join(nsDir, name) }

// ensureDir creates nsDir and makes it a mount point of its own (see nsDir).
// It is cheap when that is done; several processes (workers, test binaries)
// may race to do it, so the first time runs under a lock on the parent dir.
func ensureDir() error {
	if root, err := isMountRoot(nsDir); err == nil && root {
		return nil
	}
	if err := os.MkdirAll(nsDir, 0o755); err != nil {
		return fmt.Errorf("create netns dir: %w", errors.Join(errdefs.ErrInternal, err))
	}
	lock, err := os.Open(filepath.Dir(nsDir))
	if err != nil {
		return fmt.Errorf("open netns dir: %w", errors.Join(errdefs.ErrInternal, err))
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock netns dir: %w", errors.Join(errdefs.ErrInternal, err))
	}
	root, err := isMountRoot(nsDir)
	if err != nil || root {
		return err
	}
	for _, m := range []struct {
		src   string
		flags uintptr
	}{
		{nsDir, unix.MS_BIND | unix.MS_REC},
		{"", unix.MS_PRIVATE},
		{"", unix.MS_SHARED},
	} {
		if err := unix.Mount(m.src, nsDir, "none", m.flags, ""); err != nil {
			return fmt.Errorf("make netns dir a mount point: %w", errors.Join(errdefs.ErrInternal, err))
		}
	}
	return nil
}

// isMountRoot reports whether path is the root of a mount (a mount point
// itself, rather than a directory inside one). A bind mount of a directory
// onto itself keeps st_dev, so only statx (or the mount table, on kernels
// before 5.8) tells.
func isMountRoot(path string) (bool, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, 0, &stx); err != nil {
		return false, fmt.Errorf("stat %s: %w", filepath.Base(path), errors.Join(errdefs.ErrInternal, err))
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	mounts, err := procfs.GetMounts()
	if err != nil {
		return false, fmt.Errorf("read mount table: %w", errors.Join(errdefs.ErrInternal, err))
	}
	for _, m := range mounts {
		if m.MountPoint == path {
			return true, nil
		}
	}
	return false, nil
}

// unmountAll detaches every mount stacked on path (normally one); missing
// or not mounted is not an error.
func unmountAll(path string) error {
	for range maxLayers {
		err := unix.Unmount(path, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return fmt.Errorf("more than %d mounts on %s", maxLayers, filepath.Base(path))
}

// isNamespace reports whether path is a mounted namespace, not just the file
// a namespace was (or is about to be) mounted on.
func isNamespace(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// InNamespace runs fn on an OS thread that has joined the network namespace
// at path, then moves the thread back. Sockets and tap fds opened by fn stay
// in that namespace after it returns, which is how the proxy listens inside a
// sandbox while dialling upstreams from the host. A thread that cannot be
// moved back is left locked so the runtime discards it.
func InNamespace(path string, fn func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, errors.Join(errdefs.ErrNotFound, err))
	}
	defer target.Close()
	return inHandle(target, fn)
}

func inHandle(target netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", errors.Join(errdefs.ErrInternal, err))
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns: %w", errors.Join(errdefs.ErrInternal, err))
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: it dies with the goroutine instead of
		// carrying the wrong namespace into unrelated work.
		return errors.Join(ferr, fmt.Errorf("restore netns: %w", errors.Join(errdefs.ErrInternal, err)))
	}
	runtime.UnlockOSThread()
	return ferr
}

// createNamed makes a new named network namespace and runs setup inside it.
// It is ErrConflict if the name is taken. On any failure the namespace is
// removed again.
func createNamed(name string, setup func() error) error {
	if err := ensureDir(); err != nil {
		return err
	}
	p := NamespacePath(name)
	if err := createFile(p, name); err != nil {
		return err
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return errors.Join(fmt.Errorf("get current netns: %w", errors.Join(errdefs.ErrInternal, err)), deleteNamed(name))
	}
	defer orig.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread() // unshare failed: still in orig
		return errors.Join(fmt.Errorf("create netns %s: %w", name, errors.Join(errdefs.ErrInternal, err)), deleteNamed(name))
	}
	self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
	serr := unix.Mount(self, p, "none", unix.MS_BIND, "")
	if serr != nil {
		serr = fmt.Errorf("bind netns %s: %w", name, errors.Join(errdefs.ErrInternal, serr))
	} else {
		serr = setup()
	}
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: it dies with the goroutine.
		return errors.Join(serr, fmt.Errorf("restore netns: %w", errors.Join(errdefs.ErrInternal, err)), deleteNamed(name))
	}
	runtime.UnlockOSThread()
	if serr != nil {
		return errors.Join(serr, deleteNamed(name))
	}
	return nil
}

// createFile creates the empty file a namespace is mounted on; ErrConflict
// if it exists.
func createFile(p, name string) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("netns %s: %w", name, errdefs.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create netns file %s: %w", name, errors.Join(errdefs.ErrInternal, err))
	}
	return f.Close()
}

// renameNamed moves the namespace bind mount from old to new; the namespace
// itself, its links and rules are untouched.
func renameNamed(oldName, newName string) error {
	if err := ensureDir(); err != nil {
		return err
	}
	return bindNamed(NamespacePath(oldName), newName, func() error { return deleteNamed(oldName) })
}

// bindNamed bind-mounts the namespace at src as newName in nsDir, then runs
// done (which removes the old name).
func bindNamed(src, newName string, done func() error) error {
	newP := NamespacePath(newName)
	if err := createFile(newP, newName); err != nil {
		return err
	}
	if err := unix.Mount(src, newP, "none", unix.MS_BIND, ""); err != nil {
		os.Remove(newP)
		return fmt.Errorf("bind netns %s: %w", newName, errors.Join(errdefs.ErrInternal, err))
	}
	return done()
}

// deleteNamed unmounts and removes a named namespace; missing is not an error,
// so teardown can run twice.
func deleteNamed(name string) error {
	p := NamespacePath(name)
	if err := unmountAll(p); err != nil {
		return fmt.Errorf("unmount netns %s: %w", name, errors.Join(errdefs.ErrInternal, err))
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", name, errors.Join(errdefs.ErrInternal, err))
	}
	return nil
}

// ListNamespaces returns the names of named namespaces starting with prefix.
func ListNamespaces(prefix string) ([]string, error) { return listDir(nsDir, prefix) }

func listDir(dir, prefix string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list netns dir: %w", errors.Join(errdefs.ErrInternal, err))
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// writeSysctl writes a /proc/sys/net value; the caller's thread must be in
// the namespace the value belongs to.
func writeSysctl(key, value string) error {
	p := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s: %w", key, errors.Join(errdefs.ErrInternal, err))
	}
	return nil
}
