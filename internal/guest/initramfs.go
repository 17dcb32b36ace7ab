package guest

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
)

// ModulesManifest is the path, inside the initramfs, of the list of modules
// the agent loads: one absolute path per line, dependencies first.
const ModulesManifest = "/etc/space/modules"

// formatVersion changes whenever the initramfs layout changes, so caches
// built by older code are not reused.
const formatVersion = "space-initramfs-v1"

// dirs are created in the initramfs besides the module tree: the mount points
// PID 1 needs before it switches to the sandbox's root disk.
var dirs = []string{"dev", "proc", "sys", "run", "tmp", "mnt", "etc", "etc/space"}

// InitramfsOptions says what goes into an initramfs and where it is cached.
type InitramfsOptions struct {
	// AgentBinary is the static space-agent executable; it becomes /init.
	AgentBinary string
	// CacheDir holds built images, named by content digest.
	CacheDir string
	// Modules are module names to include (with their dependencies);
	// nil means DefaultModules.
	Modules []string
	// Logger receives build progress; nil discards it.
	Logger *slog.Logger
}

// Initramfs is a built (or cached) initramfs.
type Initramfs struct {
	// Path is the gzip-compressed newc cpio archive to pass as -initrd.
	Path string
	// Digest is "sha256:<hex>" over the inputs (agent, kernel release, modules).
	Digest string
	// Modules are the included modules in load order.
	Modules []Module
	// Cached is true when an existing archive was reused.
	Cached bool
}

// BuildInitramfs packs the agent as /init plus the modules of k it needs, and
// the load-order manifest at ModulesManifest. The result is cached by content:
// the same agent binary and module files give the same path without work.
func BuildInitramfs(ctx context.Context, k Kernel, opts InitramfsOptions) (Initramfs, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.AgentBinary == "" || opts.CacheDir == "" {
		return Initramfs{}, fmt.Errorf("guest: initramfs needs an agent binary and a cache dir: %w", errdefs.ErrInvalidArgument)
	}
	names := opts.Modules
	if names == nil {
		names = DefaultModules
	}
	mods, err := ResolveModules(k, names)
	if err != nil {
		return Initramfs{}, err
	}
	agent, err := os.ReadFile(opts.AgentBinary)
	if err != nil {
		return Initramfs{}, fmt.Errorf("guest: read agent binary (build it with `make build`): %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	digest, err := initramfsDigest(k, agent, mods)
	if err != nil {
		return Initramfs{}, err
	}
	out := Initramfs{
		Path:    filepath.Join(opts.CacheDir, "initramfs-"+digest[:32]+".cpio.gz"),
		Digest:  "sha256:" + digest,
		Modules: mods,
	}
	if fi, err := os.Stat(out.Path); err == nil && fi.Mode().IsRegular() {
		out.Cached = true
		log.DebugContext(ctx, "initramfs cached", "path", out.Path)
		return out, nil
	}
	if err := os.MkdirAll(opts.CacheDir, 0o755); err != nil {
		return Initramfs{}, fmt.Errorf("guest: create initramfs cache: %v: %w", err, errdefs.ErrInternal)
	}
	tmp, err := os.CreateTemp(opts.CacheDir, ".initramfs-*")
	if err != nil {
		return Initramfs{}, fmt.Errorf("guest: create initramfs: %v: %w", err, errdefs.ErrInternal)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if err := writeInitramfs(ctx, tmp, k, agent, mods); err != nil {
		tmp.Close()
		return Initramfs{}, err
	}
	if err := tmp.Chmod(0o644); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), out.Path)
	}
	if err != nil {
		return Initramfs{}, fmt.Errorf("guest: write initramfs: %v: %w", err, errdefs.ErrInternal)
	}
	log.InfoContext(ctx, "initramfs built", "path", out.Path, "kernel", k.Version, "modules", len(mods))
	return out, nil
}

// initramfsDigest hashes everything that ends up in the archive.
func initramfsDigest(k Kernel, agent []byte, mods []Module) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\nkernel %s\n", formatVersion, k.Version)
	fmt.Fprintf(h, "agent %x\n", sha256.Sum256(agent))
	for _, m := range mods {
		f, err := os.Open(filepath.Join(k.ModulesDir, m.Path))
		if err != nil {
			return "", fmt.Errorf("guest: open module: %v: %w", err, errdefs.ErrInternal)
		}
		mh := sha256.New()
		_, err = io.Copy(mh, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("guest: read module: %v: %w", err, errdefs.ErrInternal)
		}
		fmt.Fprintf(h, "module %s %x\n", m.Path, mh.Sum(nil))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ManifestPath is the absolute path of module m inside the initramfs.
func ManifestPath(k Kernel, m Module) string {
	return path.Join("/lib/modules", k.Version, m.Path)
}

func writeInitramfs(ctx context.Context, w io.Writer, k Kernel, agent []byte, mods []Module) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	cw := &CPIOWriter{w: zw}
	for _, d := range dirs {
		cw.Dir(d, 0o755)
	}
	cw.CharDev("dev/console", 0o600, 5, 1)
	cw.CharDev("dev/null", 0o666, 1, 3)
	cw.File("init", 0o755, bytes.NewReader(agent), int64(len(agent)))

	var manifest strings.Builder
	made := map[string]bool{}
	for _, m := range mods {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("guest: build initramfs: %w", errdefs.ErrCancelled)
		}
		p := strings.TrimPrefix(ManifestPath(k, m), "/")
		mkdirs(cw, made, path.Dir(p))
		data, err := os.ReadFile(filepath.Join(k.ModulesDir, m.Path))
		if err != nil {
			return fmt.Errorf("guest: read module %s: %v: %w", m.Name, err, errdefs.ErrInternal)
		}
		cw.File(p, 0o644, bytes.NewReader(data), int64(len(data)))
		manifest.WriteString("/" + p + "\n")
	}
	cw.File(strings.TrimPrefix(ModulesManifest, "/"), 0o644, strings.NewReader(manifest.String()), int64(manifest.Len()))
	if err := cw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// mkdirs adds dir and its missing parents, outermost first.
func mkdirs(cw *CPIOWriter, made map[string]bool, dir string) {
	if dir == "." || dir == "/" || dir == "" || made[dir] {
		return
	}
	mkdirs(cw, made, path.Dir(dir))
	made[dir] = true
	cw.Dir(dir, 0o755)
}
