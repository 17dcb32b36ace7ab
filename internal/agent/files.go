package agent

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"path"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// files serves the file operations under one root directory.
type files struct {
	root string // host path of the guest's "/"
}

func (f *files) openRoot() (int, error) {
	fd, err := unix.Open(f.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, errdefs.New(errdefs.ErrInternal, "file root unavailable").WithCause(err)
	}
	return fd, nil
}

func fileInfo(name string, st *unix.Stat_t) agentproto.FileInfo {
	fi := agentproto.FileInfo{
		Name:  name,
		Type:  agentproto.FileTypeOther,
		Size:  st.Size,
		Mode:  st.Mode & 0o7777,
		MTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		fi.Type = agentproto.FileTypeFile
	case unix.S_IFDIR:
		fi.Type = agentproto.FileTypeDir
	case unix.S_IFLNK:
		fi.Type = agentproto.FileTypeSymlink
	}
	return fi
}

func baseName(rel string) string {
	if rel == "." {
		return "/"
	}
	return path.Base(rel)
}

// stat describes the entry itself (a symlink is reported as a symlink).
func (f *files) stat(p string) (agentproto.FileInfo, error) {
	rel, err := guestPath(p)
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	root, err := f.openRoot()
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	defer unix.Close(root)
	var st unix.Stat_t
	if rel == "." {
		err = unix.Fstat(root, &st)
	} else {
		dir, base := split(rel)
		var pfd int
		if pfd, err = openIn(root, dir, unix.O_PATH|unix.O_DIRECTORY, 0); err == nil {
			err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
			_ = unix.Close(pfd)
		}
	}
	if err != nil {
		return agentproto.FileInfo{}, fsError("stat", p, err)
	}
	return fileInfo(baseName(rel), &st), nil
}

// open opens a regular file for reading, following symlinks inside the root.
func (f *files) open(p string) (*os.File, agentproto.FileInfo, error) {
	rel, err := guestPath(p)
	if err != nil {
		return nil, agentproto.FileInfo{}, err
	}
	root, err := f.openRoot()
	if err != nil {
		return nil, agentproto.FileInfo{}, err
	}
	defer unix.Close(root)
	fd, err := openIn(root, rel, unix.O_RDONLY|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, agentproto.FileInfo{}, fsError("read", p, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, agentproto.FileInfo{}, fsError("read", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		return nil, agentproto.FileInfo{}, errdefs.New(errdefs.ErrInvalidArgument, "read %s: not a regular file", p)
	}
	return os.NewFile(uintptr(fd), baseName(rel)), fileInfo(baseName(rel), &st), nil
}

// write replaces p (parents 0755) with what r holds. The bytes go to a new,
// unguessable name in the same directory, which is renamed over p only once
// r ended cleanly; any failure (a short or failed write, a full disk, a
// link that died) removes it, so a failed upload never leaves part of a
// file behind nor truncates the file it was meant to replace.
func (f *files) write(p string, mode uint32, r io.Reader) (agentproto.FileInfo, error) {
	rel, err := guestPath(p)
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	if rel == "." {
		return agentproto.FileInfo{}, errdefs.New(errdefs.ErrInvalidArgument, "write %s: is a directory", p)
	}
	if mode == 0 {
		mode = 0o644
	}
	mode &= 0o7777
	root, err := f.openRoot()
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	defer unix.Close(root)
	dir, base := split(rel)
	if err := mkdirAll(root, dir); err != nil {
		return agentproto.FileInfo{}, fsError("write", p, err)
	}
	pfd, err := openIn(root, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return agentproto.FileInfo{}, fsError("write", p, err)
	}
	defer unix.Close(pfd)
	// A directory in the way fails now rather than after the whole upload;
	// a file being replaced keeps its owner.
	var fix func(fd int)
	var cur unix.Stat_t
	if err := unix.Fstatat(pfd, base, &cur, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		switch cur.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			return agentproto.FileInfo{}, fsError("write", p, unix.EISDIR)
		case unix.S_IFREG:
			fix = func(fd int) { _ = unix.Fchown(fd, int(cur.Uid), int(cur.Gid)) }
		}
	}
	st, err := writeAtomic(pfd, base, mode, r, fix)
	if err != nil {
		return agentproto.FileInfo{}, fsError("write", p, err)
	}
	return fileInfo(baseName(rel), &st), nil
}

// writeAtomic copies r into a fresh temporary file in dirfd and renames it
// to name, or removes it on any failure. The rename replaces name itself
// (a symlink there is replaced, not written through). fix, when set, may
// change the complete file (owner, times) before the rename.
func writeAtomic(dirfd int, name string, mode uint32, r io.Reader, fix func(fd int)) (unix.Stat_t, error) {
	var st unix.Stat_t
	tmp, fd, err := createTemp(dirfd, name, mode)
	if err != nil {
		return st, err
	}
	file := os.NewFile(uintptr(fd), tmp)
	committed := false
	defer func() {
		if !committed {
			_ = file.Close()
			_ = unix.Unlinkat(dirfd, tmp, 0)
		}
	}()
	if _, err := io.Copy(file, r); err != nil {
		return st, err
	}
	if fix != nil {
		fix(fd)
	}
	// After fix, as a chown clears setuid bits; and the umask must not
	// narrow what was asked for.
	_ = unix.Fchmod(fd, mode)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, err
	}
	committed = true
	if err := file.Close(); err != nil { // the last chance to see a delayed ENOSPC
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return st, err
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return st, err
	}
	return st, nil
}

// createTemp creates a file no one else can have named: a random suffix and
// O_EXCL, so a guest process cannot plant a link or a file there first.
func createTemp(dirfd int, name string, mode uint32) (string, int, error) {
	prefix := "." + name
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	for range 10 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", -1, err
		}
		tmp := prefix + ".space-" + hex.EncodeToString(b[:])
		fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, mode)
		if err == unix.EEXIST {
			continue
		}
		return tmp, fd, err
	}
	return "", -1, unix.EEXIST
}

// list returns a directory's entries sorted by name.
func (f *files) list(p string) ([]agentproto.FileInfo, error) {
	rel, err := guestPath(p)
	if err != nil {
		return nil, err
	}
	root, err := f.openRoot()
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	fd, err := openIn(root, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fsError("list", p, err)
	}
	dir := os.NewFile(uintptr(fd), baseName(rel))
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fsError("list", p, err)
	}
	sort.Strings(names)
	out := make([]agentproto.FileInfo, 0, len(names))
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // removed meanwhile
		}
		out = append(out, fileInfo(name, &st))
	}
	return out, nil
}

// remove deletes p; a non-empty directory needs recursive.
func (f *files) remove(p string, recursive bool) error {
	rel, err := guestPath(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return errdefs.New(errdefs.ErrInvalidArgument, "cannot delete /")
	}
	root, err := f.openRoot()
	if err != nil {
		return err
	}
	defer unix.Close(root)
	dir, base := split(rel)
	pfd, err := openIn(root, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return fsError("delete", p, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fsError("delete", p, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		err = unix.Unlinkat(pfd, base, 0)
	case recursive:
		err = removeAllAt(pfd, base, st.Dev)
	default:
		err = unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return fsError("delete", p, err)
	}
	return nil
}

// removeAllAt removes the directory name under dirfd and everything in it,
// never following symlinks and never crossing into another filesystem.
func removeAllAt(dirfd int, name string, dev uint64) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), name)
	names, err := d.Readdirnames(-1)
	if err != nil {
		d.Close()
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if st.Dev != dev {
				d.Close()
				return unix.EBUSY // a mount point
			}
			err = removeAllAt(fd, n, dev)
		} else {
			err = unix.Unlinkat(fd, n, 0)
		}
		if err != nil && err != unix.ENOENT {
			d.Close()
			return err
		}
	}
	d.Close()
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}
