package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// legacyDir is where earlier versions mounted sandbox namespaces (see nsDir
// for why they no longer do). What they left there is reaped at start, or
// moved into nsDir when a sandbox adopted after an upgrade still uses it.
//
// Such a namespace may be hidden: once `ip netns add` has bind-mounted
// legacyDir onto itself, the mounts made before are underneath, where no path
// of the host reaches them, and the files they are mounted on cannot be
// removed (EBUSY). They are reached from a private copy of the mount
// namespace instead, with the mounts over legacyDir peeled off one by one;
// removing the file there makes the kernel detach whatever is mounted on it
// in every mount namespace, the host's hidden mount included.
const legacyDir = "/run/netns"

// inLegacyLayers runs visit on a thread of its own in a private copy of the
// mount namespace, once for each layer mounted over legacyDir, from the top
// down to the directory itself, until visit returns true. Nothing it does is
// seen outside except through the kernel's detaching of mounts on removed
// files.
func inLegacyLayers(visit func() (done bool, err error)) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine and takes
		// its mount namespace with it.
		runtime.LockOSThread()
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("private mount namespace: %w", errors.Join(errdefs.ErrInternal, err))
			}
			// Private first, so the unmounts below do not propagate to the host.
			if err := unix.Mount("", "/", "none", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("private mount namespace: %w", errors.Join(errdefs.ErrInternal, err))
			}
			for range maxLayers {
				done, err := visit()
				if done || err != nil {
					return err
				}
				root, err := isMountRoot(legacyDir)
				if err != nil || !root {
					return err
				}
				if err := unix.Unmount(legacyDir, unix.MNT_DETACH); err != nil {
					return fmt.Errorf("peel old netns dir: %w", errors.Join(errdefs.ErrInternal, err))
				}
			}
			return fmt.Errorf("more than %d mounts on the old netns dir: %w", maxLayers, errdefs.ErrInternal)
		}()
	}()
	return <-errc
}

// reapLegacy removes the namespaces under legacyDir whose names start with
// prefix and for which drop returns true, hidden ones included. It returns
// the names removed.
func reapLegacy(prefix string, drop func(name string) bool) ([]string, error) {
	names, err := listDir(legacyDir, prefix)
	if err != nil {
		return nil, err
	}
	left := map[string]bool{}
	for _, n := range names {
		if drop(n) {
			left[n] = true
		}
	}
	if len(left) == 0 {
		return nil, nil
	}
	var removed []string
	err = inLegacyLayers(func() (bool, error) {
		for n := range left {
			p := filepath.Join(legacyDir, n)
			if _, err := os.Lstat(p); err != nil {
				continue // not in this layer
			}
			if err := unmountAll(p); err != nil {
				return false, fmt.Errorf("unmount old netns %s: %w", n, errors.Join(errdefs.ErrInternal, err))
			}
			// EBUSY: still mounted on in a layer further down.
			if err := os.Remove(p); err == nil || errors.Is(err, os.ErrNotExist) {
				delete(left, n)
				removed = append(removed, n)
			} else if !errors.Is(err, unix.EBUSY) {
				return false, fmt.Errorf("remove old netns %s: %w", n, errors.Join(errdefs.ErrInternal, err))
			}
		}
		return len(left) == 0, nil
	})
	for n := range left {
		err = errors.Join(err, fmt.Errorf("old netns %s: still busy: %w", n, errdefs.ErrInternal))
	}
	return removed, err
}

// adoptLegacy moves the namespace name from legacyDir into nsDir, so a
// sandbox an earlier version ran keeps its network (and the tap its VMM
// holds) across the upgrade. It is ErrNotFound when legacyDir has no
// namespace of that name.
func adoptLegacy(name string) error {
	if _, err := os.Lstat(filepath.Join(legacyDir, name)); err != nil {
		return fmt.Errorf("old netns %s: %w", name, errdefs.ErrNotFound)
	}
	var ns *os.File
	err := inLegacyLayers(func() (bool, error) {
		f, err := os.Open(filepath.Join(legacyDir, name))
		if err != nil {
			return false, nil
		}
		var st unix.Statfs_t
		if unix.Fstatfs(int(f.Fd()), &st) != nil || st.Type != unix.NSFS_MAGIC {
			f.Close()
			return false, nil // the bare file: the namespace is further down
		}
		ns = f
		return true, nil
	})
	if err != nil {
		return err
	}
	if ns == nil {
		return fmt.Errorf("old netns %s: %w", name, errdefs.ErrNotFound)
	}
	defer ns.Close()
	if err := ensureDir(); err != nil {
		return err
	}
	// A namespace file opened in another mount namespace may be bind-mounted
	// here (the kernel allows it for namespace files alone).
	src := fmt.Sprintf("/proc/self/fd/%d", ns.Fd())
	return bindNamed(src, name, func() error {
		_, err := reapLegacy(name, func(n string) bool { return n == name })
		return err
	})
}
