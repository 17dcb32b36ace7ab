package storage

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Clone makes dst a copy-on-write clone of src (FICLONE): it costs the same
// for any size and shares blocks until either side writes. It never falls
// back to a full copy; a filesystem without reflinks is an error. dst must
// not exist; it gets src's permission bits.
func (s *Store) Clone(ctx context.Context, src, dst string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("storage: clone: %w", errdefs.ErrCancelled)
	}
	in, err := os.Open(src)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("storage: clone source %s: %w", src, errdefs.ErrNotFound)
		}
		return fmt.Errorf("storage: clone: %w: %v", errdefs.ErrInternal, err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return fmt.Errorf("storage: clone: %w: %v", errdefs.ErrInternal, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("storage: clone source %s is not a regular file: %w", src, errdefs.ErrInvalidArgument)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, st.Mode().Perm())
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("storage: clone target %s exists: %w", dst, errdefs.ErrConflict)
		}
		return fmt.Errorf("storage: clone: %w: %v", errdefs.ErrInternal, err)
	}
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
		out.Close()
		os.Remove(dst)
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("storage: reflink %s -> %s not possible (%v; both must be under %s): %w",
				src, dst, err, s.root, errdefs.ErrFailedPrecondition)
		}
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("storage: clone: %w", errdefs.New(errdefs.ErrResourceExhausted, "not enough free storage on the worker").WithCause(err))
		}
		return fmt.Errorf("storage: reflink %s: %w: %v", src, errdefs.ErrInternal, err)
	}
	if err := out.Close(); err != nil {
		os.Remove(dst)
		return fmt.Errorf("storage: clone: %w: %v", errdefs.ErrInternal, err)
	}
	return nil
}

// CloneAndGrow clones src (an ext4 image) to dst and grows it to sizeBytes:
// the file is extended (sparse) and its filesystem resized with resize2fs,
// which works on an unmounted image file. A size at or below src's keeps
// src's size; shrinking is not done.
func (s *Store) CloneAndGrow(ctx context.Context, src, dst string, sizeBytes int64) error {
	if err := s.Clone(ctx, src, dst); err != nil {
		return err
	}
	st, err := os.Stat(dst)
	if err != nil {
		os.Remove(dst)
		return fmt.Errorf("storage: %w: %v", errdefs.ErrInternal, err)
	}
	if sizeBytes <= st.Size() {
		return nil
	}
	if err := s.grow(ctx, dst, sizeBytes); err != nil {
		os.Remove(dst)
		return err
	}
	return nil
}

func (s *Store) grow(ctx context.Context, path string, size int64) error {
	if err := os.Truncate(path, size); err != nil {
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EFBIG) {
			return fmt.Errorf("storage: grow: %w", errdefs.New(errdefs.ErrResourceExhausted, "not enough free storage on the worker").WithCause(err))
		}
		return fmt.Errorf("storage: grow %s: %w: %v", path, errdefs.ErrInternal, err)
	}
	// resize2fs refuses a filesystem not checked since it was last mounted;
	// check (fixing only what is safe) and retry once in that case.
	if _, err := run(ctx, "resize2fs", path); err != nil {
		if errors.Is(err, errdefs.ErrFailedPrecondition) {
			return fmt.Errorf("storage: grow: %w", err)
		}
		if _, ferr := run(ctx, "e2fsck", "-f", "-p", path); ferr != nil {
			return fmt.Errorf("storage: grow: %w (after resize2fs: %v)", ferr, err)
		}
		if _, err := run(ctx, "resize2fs", path); err != nil {
			return fmt.Errorf("storage: grow: %w", err)
		}
	}
	return nil
}

// Free is the space available under Root, in bytes.
func (s *Store) Free(ctx context.Context) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(s.root, &st); err != nil {
		return 0, fmt.Errorf("storage: statfs: %w: %v", errdefs.ErrInternal, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// EnsureFree fails with a resource_exhausted error (tenant-safe message)
// when fewer than need bytes are free under Root.
func (s *Store) EnsureFree(ctx context.Context, need int64) error {
	free, err := s.Free(ctx)
	if err != nil {
		return err
	}
	if free < need {
		return errdefs.New(errdefs.ErrResourceExhausted, "not enough free storage on the worker").
			WithDetails(map[string]any{"needed_bytes": need, "free_bytes": free}).
			WithCause(fmt.Errorf("storage: need %d bytes under %s, %d free", need, s.root, free))
	}
	return nil
}
