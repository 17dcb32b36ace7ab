package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// nsDir is where named network namespaces live, as with `ip netns`.
const nsDir = "/run/netns"

// NamespacePath is the bind-mounted file of the named namespace name.
func NamespacePath(name string) string { return filepath.Join(nsDir, name) }

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
// On any failure the namespace is removed again.
func createNamed(name string, setup func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", errors.Join(errdefs.ErrInternal, err))
	}
	defer orig.Close()
	h, err := netns.NewNamed(name) // unshares this thread into the new namespace
	if err != nil {
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		return fmt.Errorf("create netns %s: %w", name, errors.Join(errdefs.ErrInternal, err))
	}
	h.Close()
	serr := setup()
	if err := netns.Set(orig); err != nil {
		_ = deleteNamed(name)
		return fmt.Errorf("restore netns: %w", errors.Join(errdefs.ErrInternal, err))
	}
	runtime.UnlockOSThread()
	if serr != nil {
		return errors.Join(serr, deleteNamed(name))
	}
	return nil
}

// renameNamed moves the namespace bind mount from old to new; the namespace
// itself, its links and rules are untouched.
func renameNamed(oldName, newName string) error {
	oldP, newP := NamespacePath(oldName), NamespacePath(newName)
	f, err := os.OpenFile(newP, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("netns %s: %w", newName, errdefs.ErrConflict)
		}
		return fmt.Errorf("create %s: %w", newP, errors.Join(errdefs.ErrInternal, err))
	}
	f.Close()
	if err := unix.Mount(oldP, newP, "none", unix.MS_BIND, ""); err != nil {
		os.Remove(newP)
		return fmt.Errorf("bind netns %s: %w", newName, errors.Join(errdefs.ErrInternal, err))
	}
	return deleteNamed(oldName)
}

// deleteNamed unmounts and removes a named namespace; missing is not an error,
// so teardown can run twice.
func deleteNamed(name string) error {
	p := NamespacePath(name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", name, errors.Join(errdefs.ErrInternal, err))
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", name, errors.Join(errdefs.ErrInternal, err))
	}
	return nil
}

// ListNamespaces returns the names of named namespaces starting with prefix.
func ListNamespaces(prefix string) ([]string, error) {
	ents, err := os.ReadDir(nsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", nsDir, errors.Join(errdefs.ErrInternal, err))
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
