// Package storage owns the worker's data dir: a directory on a filesystem
// with reflinks (copy-on-write file clones), where sandbox disks, memory
// files and snapshots live. When the configured dir's filesystem cannot
// reflink (ext4, say), it creates a sparse btrfs image inside the dir and
// loop-mounts it, and everything lives in that mount.
//
// It owns that image and mount and the clone operations. It does not decide
// which files exist or who owns them (the worker does).
package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Names inside DataDir when the loop-mounted image is used.
const (
	ImageName = "space-btrfs.img"
	VolName   = "vol"
)

// Image size bounds in GiB for the default (sparse) image.
const (
	DefaultMaxImageGiB = 64
	MinImageGiB        = 4
)

// Config says where the data lives.
type Config struct {
	// DataDir is the data dir; created if missing.
	DataDir string
	// ImageSizeGiB is the size of the btrfs image made when DataDir cannot
	// reflink. 0 means min(64, 90% of free space), at least 4. The image is
	// sparse: it takes only what is written.
	ImageSizeGiB int
}

// Store is an open data dir.
type Store struct {
	cfg   Config
	log   *slog.Logger
	root  string
	image string // "" when DataDir reflinks natively
	vol   string
}

// Open prepares the data dir: it uses DataDir itself when its filesystem
// reflinks, otherwise it creates (first time) and mounts (first time and
// after a reboot) the btrfs image, reusing a mount that is already there.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("storage: empty data dir: %w", errdefs.ErrInvalidArgument)
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("storage: %w: %v", errdefs.ErrInvalidArgument, err)
	}
	cfg.DataDir = dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: create data dir: %w: %v", errdefs.ErrInternal, err)
	}
	s := &Store{cfg: cfg, log: log.With("component", "storage"), vol: filepath.Join(dir, VolName)}

	mounted, err := isMountPoint(s.vol)
	if err != nil {
		return nil, err
	}
	if mounted {
		s.root, s.image = s.vol, filepath.Join(dir, ImageName)
		s.log.Info("reusing mounted data volume", "root", s.root)
		return s, s.checkReflink()
	}
	if probeReflink(dir) == nil {
		s.root = dir
		s.log.Info("data dir reflinks natively", "root", dir)
		return s, nil
	}
	if err := s.mountImage(ctx); err != nil {
		return nil, err
	}
	return s, s.checkReflink()
}

// Root is the reflink-capable directory all sandbox files live under.
func (s *Store) Root() string { return s.root }

// Image is the path of the loop-mounted btrfs image, or "" when the data dir
// reflinks natively.
func (s *Store) Image() string { return s.image }

// Close releases the Store. The mount stays: running sandboxes use it, and
// the next Open reuses it.
func (s *Store) Close() error { return nil }

// Unmount unmounts the loop-mounted image (the loop device, set up to
// autoclear, is released with it). spaced calls it at shutdown when no VM is
// left running on the volume; tests in their tear-down. A no-op when the
// data dir reflinks natively.
func (s *Store) Unmount(ctx context.Context) error {
	if s.image == "" {
		return nil
	}
	mounted, err := isMountPoint(s.vol)
	if err != nil || !mounted {
		return err
	}
	if err := unix.Unmount(s.vol, 0); err != nil {
		return fmt.Errorf("storage: unmount data volume: %w: %v", errdefs.ErrInternal, err)
	}
	s.log.Info("data volume unmounted", "root", s.vol)
	return nil
}

func (s *Store) checkReflink() error {
	if err := probeReflink(s.root); err != nil {
		return fmt.Errorf("storage: %s cannot reflink: %w", s.root, err)
	}
	return nil
}

func (s *Store) mountImage(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("storage: data dir %s has no reflinks and loop-mounting a btrfs image needs root: %w",
			s.cfg.DataDir, errdefs.ErrFailedPrecondition)
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Errorf("storage: data dir %s has no reflinks and this host has no loop devices "+
			"(/dev/loop-control missing: load the loop module, or give the worker /dev): %w",
			s.cfg.DataDir, errdefs.ErrFailedPrecondition)
	}
	img := filepath.Join(s.cfg.DataDir, ImageName)
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		if err := s.createImage(ctx, img); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("storage: stat image: %w: %v", errdefs.ErrInternal, err)
	}
	if err := os.MkdirAll(s.vol, 0o755); err != nil {
		return fmt.Errorf("storage: create mount point: %w: %v", errdefs.ErrInternal, err)
	}
	if _, err := run(ctx, "mount", "-t", "btrfs", "-o", "loop,noatime", img, s.vol); err != nil {
		return fmt.Errorf("storage: loop-mount %s (needs loop devices and the btrfs kernel module): %w", img, err)
	}
	s.root, s.image = s.vol, img
	s.log.Info("data volume mounted", "image", img, "root", s.vol)
	return nil
}

func (s *Store) createImage(ctx context.Context, img string) error {
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		return fmt.Errorf("storage: data dir %s has no reflinks and mkfs.btrfs is missing "+
			"(install the Debian package btrfs-progs): %w", s.cfg.DataDir, errdefs.ErrFailedPrecondition)
	}
	size := int64(s.cfg.ImageSizeGiB) << 30
	if size <= 0 {
		var st unix.Statfs_t
		if err := unix.Statfs(s.cfg.DataDir, &st); err != nil {
			return fmt.Errorf("storage: statfs: %w: %v", errdefs.ErrInternal, err)
		}
		size = min(int64(DefaultMaxImageGiB)<<30, int64(float64(st.Bavail)*float64(st.Bsize)*0.9))
		size = max(size, int64(MinImageGiB)<<30)
	}
	tmp := img + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("storage: create image: %w: %v", errdefs.ErrInternal, err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("storage: size image: %w: %v", errdefs.ErrInternal, err)
	}
	if _, err := run(ctx, "mkfs.btrfs", "-q", "-L", "space-data", tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("storage: mkfs.btrfs: %w", err)
	}
	// Rename last so a crash never leaves a half-made image under the real name.
	if err := os.Rename(tmp, img); err != nil {
		return fmt.Errorf("storage: %w: %v", errdefs.ErrInternal, err)
	}
	s.log.Info("data volume image created", "image", img, "size_gib", size>>30)
	return nil
}

// probeReflink clones one temp file onto another in dir.
func probeReflink(dir string) error {
	src, err := os.CreateTemp(dir, ".reflink-probe-")
	if err != nil {
		return fmt.Errorf("reflink probe: %w: %v", errdefs.ErrInternal, err)
	}
	defer os.Remove(src.Name())
	defer src.Close()
	if _, err := src.Write([]byte("space reflink probe")); err != nil {
		return fmt.Errorf("reflink probe: %w: %v", errdefs.ErrInternal, err)
	}
	dst, err := os.CreateTemp(dir, ".reflink-probe-")
	if err != nil {
		return fmt.Errorf("reflink probe: %w: %v", errdefs.ErrInternal, err)
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
		return fmt.Errorf("filesystem does not support reflinks (%v): %w", err, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// isMountPoint reports whether path is a mount point (per /proc/self/mountinfo).
func isMountPoint(path string) (bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("storage: read mountinfo: %w: %v", errdefs.ErrInternal, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMount(f[4]) == path {
			return true, nil
		}
	}
	return false, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// run runs a command and returns its output; the error carries its stderr
// and, when the tool is missing, the Debian package to install.
func run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if _, err := exec.LookPath(name); err != nil {
		pkg := map[string]string{
			"mount": "mount", "mkfs.btrfs": "btrfs-progs", "resize2fs": "e2fsprogs", "e2fsck": "e2fsprogs",
		}[name]
		return nil, fmt.Errorf("%s not found (install the Debian package %s): %w", name, pkg, errdefs.ErrFailedPrecondition)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %v: %s: %w", name, err, strings.TrimSpace(stderr.String()), errdefs.ErrInternal)
	}
	return out, nil
}
