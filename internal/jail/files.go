package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// A directory a jailed VMM can write (Firecracker's run dir) holds
// whatever the VMM puts there, and a VMM taken over by its guest can put
// anything: a symlink to /etc/shadow, a hardlink, a FIFO or a directory
// where the host expects the file it asked for. The host runs as root, so
// it never opens, chowns, chmods, clones or copies such a file by path:
// it opens it here, relative to an fd of its directory, without following
// a symlink anywhere (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), as an
// O_PATH fd first (opening a FIFO or a device could block or act), checks
// with fstat that it is a regular file with one link and the expected
// owner, and only then reopens that same inode for I/O; what follows
// (fsync, fchown, fchmod, copy, reflink) goes through the fd. The files
// the jail chowns to a VMM (Spec.Own) are opened the same way.

const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Owner says which owners a file may have.
type Owner func(uid uint32) bool

// OwnedBy accepts only uid.
func OwnedBy(uid int) Owner { return func(u uint32) bool { return int64(u) == int64(uid) } }

// OwnedByHostOrVMM accepts root and any VMM's id: what a memory file or a
// disk a previous VMM of the same sandbox wrote may be owned by.
func OwnedByHostOrVMM(u uint32) bool { return u == 0 || u >= FirstID && u < FirstID+NumIDs }

// OpenDir opens the directory at path to open files in it with OpenIn.
// The path is the host's (its parents are root's), but its last element
// must be a directory, not a symlink to one.
func OpenDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("jail: open dir %s: %w: %v", filepath.Base(path), errdefs.ErrInternal, err)
	}
	return f, nil
}

// OpenIn opens the existing file name (one path element) in dir for flag
// (os.O_RDONLY, os.O_RDWR, with os.O_TRUNC, ...), and refuses anything
// but a regular file with one link whose owner owner accepts.
func OpenIn(dir *os.File, name string, flag int, owner Owner) (*os.File, error) {
	if filepath.Base(name) != name || name == "." || name == ".." {
		return nil, fmt.Errorf("jail: file name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	pfd, st, err := pathBeneath(dir, name)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	if err := check(name, st, owner); err != nil {
		return nil, err
	}
	// The O_PATH fd names the inode just checked; reopening it through
	// /proc/self/fd opens that inode, whatever name has become since.
	flag &^= os.O_CREATE | os.O_EXCL
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(pfd), flag|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("jail: open %s: %w: %v", name, errdefs.ErrInternal, err)
	}
	return f, nil
}

// CreateIn creates name in dir with mode perm, for writing. Nothing may
// exist under that name (O_EXCL: a symlink planted there is refused, not
// followed).
func CreateIn(dir *os.File, name string, perm uint32) (*os.File, error) {
	if filepath.Base(name) != name || name == "." || name == ".." {
		return nil, fmt.Errorf("jail: file name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	fd, err := unix.Openat2(int(dir.Fd()), name, &unix.OpenHow{
		Flags:   unix.O_CREAT | unix.O_EXCL | unix.O_RDWR | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NOCTTY,
		Mode:    uint64(perm),
		Resolve: resolveBeneath,
	})
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, refuse(name, "something is already there")
		}
		return nil, fmt.Errorf("jail: create %s: %w", name, errnoClass(err))
	}
	return os.NewFile(uintptr(fd), name), nil
}

// OpenOwn opens the host file at path as OpenIn does, for a VMM to be
// given (Spec.Own): a regular file with one link, owned by root or by a
// previous VMM.
func OpenOwn(path string, flag int) (*os.File, error) {
	d, err := OpenDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return OpenIn(d, filepath.Base(path), flag, OwnedByHostOrVMM)
}

// Give makes the open file f the VMM uid's, mode 0600.
func Give(f *os.File, uid int) error {
	if err := f.Chown(uid, uid); err != nil {
		return fmt.Errorf("jail: give %s to the vmm: %w: %v", filepath.Base(f.Name()), errdefs.ErrInternal, err)
	}
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("jail: mode of %s: %w: %v", filepath.Base(f.Name()), errdefs.ErrInternal, err)
	}
	return nil
}

// MoveOut moves the file name, which the VMM wrote in dir and which owner
// must accept, to the host path dst (in a directory the VMM cannot
// write), after an fsync: by rename where it can (checking that what
// arrived is the inode it checked, since the VMM may swap the name in
// between), else by a copy from the checked fd.
func MoveOut(dir *os.File, name, dst string, owner Owner) error {
	src, err := OpenIn(dir, name, os.O_RDONLY, owner)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := src.Sync(); err != nil {
		return fmt.Errorf("jail: sync %s: %w: %v", name, errdefs.ErrInternal, err)
	}
	var want unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &want); err != nil {
		return fmt.Errorf("jail: stat %s: %w: %v", name, errdefs.ErrInternal, err)
	}
	dd, err := OpenDir(filepath.Dir(dst))
	if err != nil {
		return err
	}
	defer dd.Close()
	base := filepath.Base(dst)
	tmp := "." + base + ".in-" + strconv.FormatUint(rand.Uint64(), 36)
	err = unix.Renameat2(int(dir.Fd()), name, int(dd.Fd()), tmp, unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
		got, err := OpenIn(dd, tmp, os.O_RDONLY, owner)
		if err != nil {
			_ = unix.Unlinkat(int(dd.Fd()), tmp, 0)
			return err
		}
		var st unix.Stat_t
		err = unix.Fstat(int(got.Fd()), &st)
		got.Close()
		if err != nil || st.Dev != want.Dev || st.Ino != want.Ino {
			_ = unix.Unlinkat(int(dd.Fd()), tmp, 0)
			return refuse(name, "replaced while it was moved")
		}
	case errors.Is(err, unix.EXDEV):
		out, err := CreateIn(dd, tmp, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, src); err != nil {
			out.Close()
			_ = unix.Unlinkat(int(dd.Fd()), tmp, 0)
			return fmt.Errorf("jail: copy %s: %w: %v", name, errdefs.ErrInternal, err)
		}
		if err := out.Sync(); err != nil {
			out.Close()
			_ = unix.Unlinkat(int(dd.Fd()), tmp, 0)
			return fmt.Errorf("jail: sync %s: %w: %v", name, errdefs.ErrInternal, err)
		}
		out.Close()
		_ = unix.Unlinkat(int(dir.Fd()), name, 0)
	default:
		return fmt.Errorf("jail: move %s: %w: %v", name, errdefs.ErrInternal, err)
	}
	if err := unix.Renameat(int(dd.Fd()), tmp, int(dd.Fd()), base); err != nil {
		_ = unix.Unlinkat(int(dd.Fd()), tmp, 0)
		return fmt.Errorf("jail: move %s: %w: %v", name, errdefs.ErrInternal, err)
	}
	return nil
}

// DialUnix connects to the unix socket at path, in a directory the VMM
// writes (Firecracker's API and vsock sockets): a symlink there to another
// socket (another sandbox's agent, a host daemon's) would have the host
// talk to it as to this VMM. The socket is looked up as OpenIn looks up a
// file, must be a socket, and is connected to through its O_PATH fd.
func DialUnix(ctx context.Context, path string) (net.Conn, error) {
	dir, err := OpenDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	name := filepath.Base(path)
	pfd, st, err := pathBeneath(dir, name)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, refuse(name, fmt.Sprintf("not a socket (mode %#o)", st.Mode&unix.S_IFMT))
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(pfd))
}

func check(name string, st *unix.Stat_t, owner Owner) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		return refuse(name, "a symlink")
	case unix.S_IFDIR:
		return refuse(name, "a directory")
	case unix.S_IFIFO:
		return refuse(name, "a FIFO")
	default:
		return refuse(name, fmt.Sprintf("not a regular file (mode %#o)", st.Mode&unix.S_IFMT))
	}
	if st.Nlink != 1 {
		return refuse(name, fmt.Sprintf("%d hard links", st.Nlink))
	}
	if owner != nil && !owner(st.Uid) {
		return refuse(name, fmt.Sprintf("owned by uid %d", st.Uid))
	}
	return nil
}

// refuse is the error for a file the host will not touch: the VMM (or
// something else) left the wrong kind of thing where the host expected
// its file.
func refuse(name, what string) error {
	return fmt.Errorf("jail: refusing %s (%s): not a regular file of the vmm's own: %w", name, what, errdefs.ErrInternal)
}

func errnoClass(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
	}
	return fmt.Errorf("%w: %v", errdefs.ErrInternal, err)
}

// pathBeneath opens name in dir as an O_PATH fd, never through a symlink
// or out of dir, and stats what it names: the inode every later step
// checks and uses. The caller closes the fd.
func pathBeneath(dir *os.File, name string) (int, *unix.Stat_t, error) {
	pfd, err := unix.Openat2(int(dir.Fd()), name, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveBeneath,
	})
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			return -1, nil, refuse(name, "a symlink")
		}
		return -1, nil, fmt.Errorf("jail: open %s: %w", name, errnoClass(err))
	}
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		unix.Close(pfd)
		return -1, nil, fmt.Errorf("jail: stat %s: %w: %v", name, errdefs.ErrInternal, err)
	}
	return pfd, &st, nil
}
