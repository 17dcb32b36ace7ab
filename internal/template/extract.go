package template

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Whiteout markers of OCI/Docker layers.
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// applier writes tar entries under a root directory. Every path is resolved
// with openat2(RESOLVE_IN_ROOT), as if the root were a chroot: neither ".."
// nor a symlink planted by an earlier entry or layer can make a write land
// outside it. The last component of a path is never followed: it is created,
// replaced or removed with the *at calls that act on the link itself.
type applier struct {
	root  int    // O_PATH descriptor of the root directory
	what  string // "layer 2 of 3", "rootfs": names the archive in messages
	layer bool   // interpret whiteouts and opaque markers

	limit int64  // content bytes allowed in total; 0 means no limit
	used  *int64 // content bytes written so far, shared across layers

	// Paths written by the current layer, and their ancestors: an opaque
	// marker hides only what lower layers put in its directory.
	created   map[string]bool
	ancestors map[string]bool
}

func newApplier(rootDir string, used *int64, limit int64) (*applier, error) {
	fd, err := unix.Open(rootDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("template: open staging root: %v: %w", err, errdefs.ErrInternal)
	}
	return &applier{root: fd, used: used, limit: limit}, nil
}

func (a *applier) Close() error { return unix.Close(a.root) }

// apply extracts one tar stream. layer says whether whiteouts apply.
func (a *applier) apply(ctx context.Context, r io.Reader, what string, layer bool) error {
	a.what, a.layer = what, layer
	a.created, a.ancestors = map[string]bool{}, map[string]bool{}
	tr := tar.NewReader(r)
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("template: extract: %w", errdefs.ErrCancelled)
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if n == 0 && !layer {
				return errdefs.New(errdefs.ErrInvalidArgument, "%s: the archive is empty", what)
			}
			return nil
		}
		if err != nil {
			return errdefs.New(errdefs.ErrInvalidArgument, "%s: not a valid tar archive (%v)", what, err).WithCause(err)
		}
		if err := a.entry(h, tr); err != nil {
			return err
		}
	}
}

// cleanName turns an entry name into a path relative to the root ("" is the
// root itself). Names that climb out of the root are refused rather than
// clamped, since an archive holding them is broken or hostile.
func cleanName(name string) (string, bool) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", false
	}
	p := path.Clean("./" + strings.TrimLeft(name, "/"))
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", false
	}
	if p == "." {
		return "", true
	}
	return p, true
}

func (a *applier) entry(h *tar.Header, r io.Reader) error {
	rel, ok := cleanName(h.Name)
	if !ok {
		return errdefs.New(errdefs.ErrInvalidArgument, "%s: entry %q points outside the image", a.what, h.Name)
	}
	if rel == "" || h.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if a.layer && strings.HasPrefix(base, whiteoutPrefix) {
		return a.whiteout(dir, base)
	}
	pfd, err := a.openDir(dir, true)
	if err != nil {
		return a.entryErr(h.Name, err)
	}
	defer unix.Close(pfd)
	a.record(rel)

	uid, gid, mode := h.Uid, h.Gid, uint32(h.Mode)&0o7777
	switch h.Typeflag {
	case tar.TypeDir:
		err = a.mkdir(pfd, base, uid, gid, mode)
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archives still use TypeRegA
		err = a.file(pfd, base, h, r)
	case tar.TypeSymlink:
		if err = removeAllAt(pfd, base); err == nil {
			err = unix.Symlinkat(h.Linkname, pfd, base)
		}
		if err == nil {
			err = unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		}
	case tar.TypeLink:
		err = a.hardlink(pfd, base, rel, h.Linkname)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[h.Typeflag]
		if err = removeAllAt(pfd, base); err == nil {
			err = unix.Mknodat(pfd, base, kind|mode, int(unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor))))
		}
		if err == nil {
			err = unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err == nil {
			err = unix.Fchmodat(pfd, base, mode, 0) // a fresh node, not a link
		}
	default:
		return nil // sockets and vendor types carry nothing a root file system needs
	}
	if err != nil {
		return a.entryErr(h.Name, err)
	}
	if h.Typeflag != tar.TypeDir && h.Typeflag != tar.TypeLink {
		ts := []unix.Timespec{unix.NsecToTimespec(h.ModTime.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
		_ = unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW) // best effort: times are cosmetic
	}
	return nil
}

func (a *applier) record(rel string) {
	a.created[rel] = true
	for d := path.Dir(rel); d != "." && !a.ancestors[d]; d = path.Dir(d) {
		a.ancestors[d] = true
	}
}

// openDir opens directory rel inside the root (O_PATH), creating missing
// directories (0755, root-owned, as the OCI spec implies) when create is set.
func (a *applier) openDir(rel string, create bool) (int, error) {
	if rel == "" {
		return unix.Dup(a.root)
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(a.root, rel, &how)
	for err == unix.EAGAIN || err == unix.EINTR {
		fd, err = unix.Openat2(a.root, rel, &how)
	}
	if err != unix.ENOENT || !create {
		return fd, err
	}
	parent, base := path.Split(rel)
	pfd, err := a.openDir(strings.TrimSuffix(parent, "/"), true)
	if err != nil {
		return -1, err
	}
	err = unix.Mkdirat(pfd, base, 0o755)
	unix.Close(pfd)
	if err != nil && err != unix.EEXIST {
		return -1, err
	}
	// Resolve the whole path again: base may be a symlink an entry made.
	return unix.Openat2(a.root, rel, &how)
}

func (a *applier) mkdir(pfd int, base string, uid, gid int, mode uint32) error {
	err := unix.Mkdirat(pfd, base, 0o700)
	if err == unix.EEXIST {
		var st unix.Stat_t
		if err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR { // a later layer turns a file into a directory
			if err = removeAllAt(pfd, base); err == nil {
				err = unix.Mkdirat(pfd, base, 0o700)
			}
		}
	}
	if err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return err
	}
	return unix.Fchmod(fd, mode)
}

func (a *applier) file(pfd int, base string, h *tar.Header, r io.Reader) error {
	if h.Size < 0 {
		return unix.EINVAL
	}
	if a.limit > 0 && *a.used+h.Size > a.limit {
		return errdefs.New(errdefs.ErrInvalidArgument, "the image content exceeds the size limit of %d MiB", a.limit/mib)
	}
	*a.used += h.Size
	if err := removeAllAt(pfd, base); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	if _, err := io.CopyN(f, r, h.Size); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return errdefs.New(errdefs.ErrInvalidArgument, "%s: entry %q is truncated", a.what, h.Name)
		}
		var perr *os.PathError
		if errors.As(err, &perr) { // a write error: keep the errno, drop the name
			return perr.Err
		}
		return errdefs.New(errdefs.ErrInvalidArgument, "%s: entry %q cannot be read (%v)", a.what, h.Name, err).WithCause(err)
	}
	for k, v := range h.PAXRecords { // file capabilities (ping, …) travel as xattrs
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok && strings.HasPrefix(name, "security.capability") {
			_ = unix.Fsetxattr(fd, name, []byte(v), 0)
		}
	}
	if err := unix.Fchown(fd, h.Uid, h.Gid); err != nil {
		return err
	}
	return unix.Fchmod(fd, uint32(h.Mode)&0o7777) // after chown, which clears set-id bits
}

func (a *applier) hardlink(pfd int, base, rel, linkname string) error {
	target, ok := cleanName(linkname)
	if !ok || target == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "%s: hard link %q -> %q points outside the image", a.what, rel, linkname)
	}
	if target == rel {
		return nil
	}
	tdir, tbase := path.Split(target)
	tfd, err := a.openDir(strings.TrimSuffix(tdir, "/"), false)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	if err := removeAllAt(pfd, base); err != nil {
		return err
	}
	return unix.Linkat(tfd, tbase, pfd, base, 0) // 0: link a symlink itself, never its target
}

// whiteout applies a ".wh.<name>" or opaque marker found in directory dir.
func (a *applier) whiteout(dir, base string) error {
	pfd, err := a.openDir(dir, false)
	if err == unix.ENOENT {
		return nil // nothing below to hide
	}
	if err != nil {
		return a.entryErr(path.Join(dir, base), err)
	}
	defer unix.Close(pfd)
	if base == opaqueMarker {
		if err := a.clearLower(pfd, dir); err != nil {
			return a.entryErr(path.Join(dir, base), err)
		}
		return nil
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if name == "" || name == "." || name == ".." {
		return errdefs.New(errdefs.ErrInvalidArgument, "%s: bad whiteout %q", a.what, path.Join(dir, base))
	}
	if a.created[path.Join(dir, name)] {
		return nil // whiteouts hide lower layers only
	}
	if err := removeAllAt(pfd, name); err != nil {
		return a.entryErr(path.Join(dir, base), err)
	}
	return nil
}

// clearLower removes what lower layers left in the directory open as fd
// (at rel), keeping what the current layer wrote.
func (a *applier) clearLower(fd int, rel string) error {
	names, err := readDirNames(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		p := path.Join(rel, n)
		if !a.created[p] && !a.ancestors[p] {
			if err := removeAllAt(fd, n); err != nil {
				return err
			}
			continue
		}
		cfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOTDIR || err == unix.ELOOP {
			continue // a file or link of this layer
		}
		if err != nil {
			return err
		}
		err = a.clearLower(cfd, p)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

// entryErr classifies a failure to write an entry: conflicts inside the
// archive are the image's fault; anything else is the host's.
func (a *applier) entryErr(name string, err error) error {
	var pub *errdefs.Public
	if errors.As(err, &pub) {
		return err
	}
	switch {
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ENOENT), errors.Is(err, unix.EEXIST),
		errors.Is(err, unix.ELOOP), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EXDEV),
		errors.Is(err, unix.ENAMETOOLONG), errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENOTEMPTY):
		return errdefs.New(errdefs.ErrInvalidArgument, "%s: cannot write entry %q: %v", a.what, name, err).WithCause(err)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return errdefs.New(errdefs.ErrResourceExhausted, "the build host is out of disk space").WithCause(err)
	}
	return fmt.Errorf("template: %s: write %q: %v: %w", a.what, name, err, errdefs.ErrInternal)
}

// removeAllAt removes name in dirfd and, for a directory, everything in it,
// without following symlinks. A missing name is not an error.
func removeAllAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	names, err := readDirNames(fd)
	if err == nil {
		for _, n := range names {
			if err = removeAllAt(fd, n); err != nil {
				break
			}
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// readDirNames lists a directory given by descriptor, leaving fd open.
func readDirNames(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), ".")
	defer f.Close()
	return f.Readdirnames(-1)
}
