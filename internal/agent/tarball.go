package agent

import (
	"archive/tar"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// tarOut writes the directory p as a tar stream to w, calling ready first
// once p was found. Symlinks are stored as links, never followed; other
// filesystems mounted below p are not entered.
func (f *files) tarOut(p string, w io.Writer, ready func() error) error {
	rel, err := guestPath(p)
	if err != nil {
		return err
	}
	root, err := f.openRoot()
	if err != nil {
		return err
	}
	defer unix.Close(root)
	fd, err := openIn(root, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fsError("tar", p, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return fsError("tar", p, err)
	}
	if err := ready(); err != nil {
		_ = unix.Close(fd)
		return err
	}
	tw := tar.NewWriter(w)
	if err := tarDir(tw, fd, "", st.Dev); err != nil {
		return err
	}
	return tw.Close()
}

func tarHeader(name string, st *unix.Stat_t) *tar.Header {
	return &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		Format:  tar.FormatPAX,
	}
}

// tarDir closes dirfd: the *os.File wrapping it owns it. (Closing the raw fd
// as well would let the File's finalizer close the number again later,
// when it may name another file, such as a process's output pipe.)
func tarDir(tw *tar.Writer, dirfd int, prefix string, dev uint64) error {
	d := os.NewFile(uintptr(dirfd), prefix)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		name := prefix + n
		h := tarHeader(name, &st)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if st.Dev != dev {
				continue
			}
			sub, err := unix.Openat(dirfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			if err := tarDir(tw, sub, name+"/", dev); err != nil {
				return err
			}
		case unix.S_IFLNK:
			buf := make([]byte, unix.PathMax)
			k, err := unix.Readlinkat(dirfd, n, buf)
			if err != nil {
				continue
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, string(buf[:k])
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
		case unix.S_IFREG:
			fd, err := unix.Openat(dirfd, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
			if err != nil {
				continue
			}
			file := os.NewFile(uintptr(fd), name)
			h.Typeflag, h.Size = tar.TypeReg, st.Size
			if err := tw.WriteHeader(h); err != nil {
				file.Close()
				return err
			}
			k, err := io.CopyN(tw, file, st.Size)
			file.Close()
			if err != nil && err != io.EOF {
				return err
			}
			if k < st.Size { // the file shrank while we read it
				if _, err := io.CopyN(tw, zeros{}, st.Size-k); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// tarIn unpacks a tar stream under the directory p (created if missing).
// The directory is the resolution root for every entry: names with ".." or
// a leading "/" are rejected, and symlinks (from the archive or already on
// disk) are resolved as if p were "/", so nothing lands outside p.
func (f *files) tarIn(p string, r io.Reader) error {
	rel, err := guestPath(p)
	if err != nil {
		return err
	}
	root, err := f.openRoot()
	if err != nil {
		return err
	}
	defer unix.Close(root)
	if err := mkdirAll(root, rel); err != nil {
		return fsError("untar", p, err)
	}
	target, err := openIn(root, rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return fsError("untar", p, err)
	}
	defer unix.Close(target)
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return errdefs.New(errdefs.ErrInvalidArgument, "untar %s: bad archive", p).WithCause(err)
		}
		name, err := entryName(h.Name)
		if err != nil {
			return err
		}
		if err := untarEntry(target, name, h, tr); err != nil {
			return fsError("untar", p+"/"+name, err)
		}
	}
}

// entryName validates an archive member name and returns it relative.
func entryName(n string) (string, error) {
	if strings.HasPrefix(n, "/") || strings.IndexByte(n, 0) >= 0 {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "archive entry %q: absolute names are not allowed", n)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", errdefs.New(errdefs.ErrInvalidArgument, "archive entry %q: \"..\" is not allowed", n)
		}
	}
	rel, err := guestPath("/" + n)
	if err != nil {
		return "", err
	}
	return rel, nil
}

func untarEntry(root int, name string, h *tar.Header, r io.Reader) error {
	mode := uint32(h.Mode) & 0o7777
	if name == "." {
		return nil
	}
	if h.Typeflag == tar.TypeDir {
		if err := mkdirAll(root, name); err != nil {
			return err
		}
		fd, err := openIn(root, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		_ = unix.Fchmod(fd, mode)
		_ = unix.Fchown(fd, h.Uid, h.Gid)
		return unix.Close(fd)
	}
	dir, base := split(name)
	if err := mkdirAll(root, dir); err != nil {
		return err
	}
	pfd, err := openIn(root, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA {
		// Written under a temporary name and renamed over what is there
		// (never written through it) once complete: an archive cut off or a
		// disk full in the middle of a member leaves the members before it,
		// each whole, and nothing of the one that failed.
		_, err := writeAtomic(pfd, base, mode, r, func(fd int) {
			_ = unix.Fchown(fd, h.Uid, h.Gid)
			t := unix.NsecToTimeval(h.ModTime.UnixNano())
			_ = unix.Futimes(fd, []unix.Timeval{t, t})
		})
		return err
	}
	// Replace what is there, but never write through it.
	if err := unix.Unlinkat(pfd, base, 0); err != nil && err != unix.ENOENT && err != unix.EISDIR {
		return err
	}
	switch h.Typeflag {
	case tar.TypeSymlink:
		if err := unix.Symlinkat(h.Linkname, pfd, base); err != nil {
			return err
		}
		_ = unix.Fchownat(pfd, base, h.Uid, h.Gid, unix.AT_SYMLINK_NOFOLLOW)
		return nil
	case tar.TypeLink:
		old, err := entryName(h.Linkname)
		if err != nil {
			return err
		}
		odir, obase := split(old)
		ofd, err := openIn(root, odir, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(ofd)
		return unix.Linkat(ofd, obase, pfd, base, 0)
	}
	return nil // devices, fifos and the like are skipped
}
