package agent

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Every file operation resolves its path with openat2(RESOLVE_IN_ROOT) under
// a directory fd: ".." and symlinks (absolute ones included) are resolved as
// if that directory were "/", so no path and no link can leave it. In the
// guest the root is "/"; tests point it at a temporary directory, and tar-in
// uses the target directory itself as the root.

// guestPath checks a tenant-supplied path and returns it cleaned and relative
// to the root ("." for the root itself).
func guestPath(p string) (string, error) {
	if p == "" || p[0] != '/' {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "path %q must be absolute", p)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "path must not contain NUL")
	}
	rel := strings.TrimPrefix(path.Clean(p), "/")
	if rel == "" {
		rel = "."
	}
	return rel, nil
}

func openIn(root int, rel string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat2(root, rel, &unix.OpenHow{
			Flags:   uint64(flags | unix.O_CLOEXEC),
			Mode:    uint64(mode),
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// split returns the parent and the last element of a root-relative path.
func split(rel string) (string, string) {
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	return dir, base
}

// mkdirAll creates rel and its parents under root (0755), each step resolved
// inside root.
func mkdirAll(root int, rel string) error {
	if rel == "." {
		return nil
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		fd, err := openIn(root, sub, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err == nil {
			_ = unix.Close(fd)
			continue
		}
		if err != unix.ENOENT {
			return err
		}
		dir, base := split(sub)
		pfd, err := openIn(root, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(pfd, base, 0o755)
		_ = unix.Close(pfd)
		if err != nil && err != unix.EEXIST {
			return err
		}
		if err == unix.EEXIST {
			// Something (a dangling symlink) is there but is not a directory.
			fd, err := openIn(root, sub, unix.O_PATH|unix.O_DIRECTORY, 0)
			if err != nil {
				return err
			}
			_ = unix.Close(fd)
		}
	}
	return nil
}

// fsError turns a syscall error into a tenant-safe errdefs error naming the
// path the tenant gave (never the host path behind it).
func fsError(op, p string, err error) error {
	var pub *errdefs.Public
	if errors.As(err, &pub) {
		return err
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return errdefs.New(errdefs.ErrInternal, "%s %s failed", op, p).WithCause(err)
	}
	class := errdefs.ErrInternal
	msg := errno.Error()
	switch errno {
	case unix.ENOENT:
		class, msg = errdefs.ErrNotFound, "no such file or directory"
	case unix.EEXIST:
		class = errdefs.ErrConflict
	case unix.ENOTEMPTY:
		class, msg = errdefs.ErrConflict, "directory not empty (use recursive)"
	case unix.ENOTDIR, unix.EISDIR, unix.ELOOP, unix.ENAMETOOLONG, unix.EXDEV, unix.EINVAL:
		class = errdefs.ErrInvalidArgument
	case unix.EACCES, unix.EPERM, unix.EROFS, unix.EBUSY:
		class = errdefs.ErrPermissionDenied
	case unix.ENOSPC, unix.EDQUOT, unix.EMFILE, unix.ENFILE:
		class = errdefs.ErrResourceExhausted
	}
	return &errdefs.Public{Class: class, Message: fmt.Sprintf("%s %s: %s", op, p, msg), Cause: err}
}
