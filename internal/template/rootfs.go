package template

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/space-sandbox/space/internal/errdefs"
)

// checkPath validates a host path a tenant named as a source: it must be
// absolute, exist, and lie under one of the configured source roots.
// Messages name only p itself.
func (b *Builder) checkPath(p string) (os.FileInfo, error) {
	if !filepath.IsAbs(p) {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "source path %q must be absolute", p)
	}
	// Refuse a path outside the roots before looking at it, so the answer
	// never says whether something exists there.
	if len(b.cfg.SourceRoots) > 0 && !b.underRoots(filepath.Clean(p), false) {
		return nil, errdefs.New(errdefs.ErrPermissionDenied, "source path %q is outside the directories templates may be built from", p)
	}
	real, err := filepath.EvalSymlinks(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "source path %q does not exist", p)
	}
	if err != nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "source path %q cannot be read", p).WithCause(err)
	}
	if len(b.cfg.SourceRoots) > 0 && !b.underRoots(real, true) {
		return nil, errdefs.New(errdefs.ErrPermissionDenied, "source path %q is outside the directories templates may be built from", p)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "source path %q cannot be read", p).WithCause(err)
	}
	return fi, nil
}

// underRoots reports whether p lies in a source root. resolved says p has
// its symlinks resolved, so only the roots' resolved paths count; a path as
// given may also name a root by its unresolved path.
func (b *Builder) underRoots(p string, resolved bool) bool {
	for _, r := range b.cfg.SourceRoots {
		if !resolved && within(filepath.Clean(r), p) {
			return true
		}
		if rr, err := filepath.EvalSymlinks(r); err == nil && within(rr, p) {
			return true
		}
	}
	return false
}

func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// resolveRootfs opens a rootfs source: a tar (plain or gzip) whose entries
// are the root file system, or a directory that is one. The digest is the
// sha256 of the tar, or of the tar stream a directory is read as.
func (b *Builder) resolveRootfs(ctx context.Context, src Source, bs *buildState) (*resolved, error) {
	if src.Path == "" {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "a rootfs source needs a path (a tar or a directory)")
	}
	p := src.Path
	fi, err := b.checkPath(p)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		h := sha256.New()
		if err := dirTar(ctx, p, h); err != nil {
			return nil, err
		}
		digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
		bs.logf("source %s: directory, content %s", p, digest)
		return &resolved{digest: digest, populate: func(ctx context.Context, root string, bs *buildState) error {
			bs.progress("copy directory", 10)
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(dirTar(ctx, p, pw)) }()
			defer pr.Close()
			return extractTo(ctx, root, pr, "rootfs", bs)
		}}, nil
	}
	if !fi.Mode().IsRegular() {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "source path %q is neither a tar nor a directory", p)
	}
	digest, err := fileDigest(ctx, p)
	if err != nil {
		return nil, err
	}
	bs.logf("source %s: archive %s", p, digest)
	return &resolved{digest: digest, populate: func(ctx context.Context, root string, bs *buildState) error {
		bs.progress("extract archive", 10)
		f, err := os.Open(p)
		if err != nil {
			return errdefs.New(errdefs.ErrInvalidArgument, "source path %q cannot be read", p).WithCause(err)
		}
		defer f.Close()
		br := bufio.NewReader(f)
		var r io.Reader = br
		if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
			zr, err := gzip.NewReader(br)
			if err != nil {
				return errdefs.New(errdefs.ErrInvalidArgument, "%q is not a valid gzip file", p).WithCause(err)
			}
			defer zr.Close()
			r = zr
		}
		err = extractTo(ctx, root, ctxReader{ctx, r}, fmt.Sprintf("%q", p), bs)
		var pub *errdefs.Public
		if errors.As(err, &pub) && strings.Contains(pub.Message, "not a valid tar") {
			return errdefs.New(errdefs.ErrInvalidArgument, "%q is not a tar archive (plain or gzip) or a directory", p).WithCause(err)
		}
		return err
	}}, nil
}

func extractTo(ctx context.Context, root string, r io.Reader, what string, bs *buildState) error {
	a, err := newApplier(root, &bs.used, bs.limit)
	if err != nil {
		return err
	}
	defer a.Close()
	return a.apply(ctx, r, what, false)
}

// dirTar writes the tree under dir as a tar stream: lexical order, owners,
// modes, times, symlinks as links, hard links once. Nothing is followed.
func dirTar(ctx context.Context, dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		var target string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		st, _ := fi.Sys().(*syscall.Stat_t)
		if st != nil {
			h.Uid, h.Gid = int(st.Uid), int(st.Gid)
			h.AccessTime, h.ChangeTime = fi.ModTime(), fi.ModTime() // stable across reads
			if fi.Mode().IsRegular() && st.Nlink > 1 {
				key := [2]uint64{st.Dev, st.Ino}
				if first, ok := links[key]; ok {
					h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
				} else {
					links[key] = h.Name
				}
			}
		}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, h.Size)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("template: read source directory: %w", errdefs.ErrCancelled)
		}
		var pub *errdefs.Public
		if errors.As(err, &pub) {
			return err
		}
		return errdefs.New(errdefs.ErrInvalidArgument, "the source directory cannot be read completely: %v", stripPath(err, dir)).WithCause(err)
	}
	return nil
}

// stripPath reduces a path error to its operation and errno, keeping host
// paths below the source out of messages.
func stripPath(err error, _ string) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return "read error"
}
