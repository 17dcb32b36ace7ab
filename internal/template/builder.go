package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// buildFormat changes whenever what Build puts into an image changes, so
// cached builds made by older code are not reused.
const buildFormat = "space-build-v1"

// BuilderConfig configures a Builder. Zero values take the documented
// defaults.
type BuilderConfig struct {
	// TemplatesDir holds all templates; required.
	TemplatesDir string
	// AgentBinary is the static space-agent executable copied to AgentPath
	// in every image; required.
	AgentBinary string
	// Busybox is a static busybox that becomes /bin/sh in images without
	// one. Default /bin/busybox; when missing such images get a warning.
	Busybox string
	// CacheDir keeps downloads between builds (apt archives). Default
	// <TemplatesDir>/.cache.
	CacheDir string
	// HeadroomMiB is free space added to an image beyond its content.
	// Default 256.
	HeadroomMiB int
	// MaxContentBytes caps a template's file content. Default 8 GiB.
	MaxContentBytes int64
	// SourceRoots, when set, are the only host directories path sources may
	// come from; other paths fail with permission_denied.
	SourceRoots []string
	// RegistryAllow names registries ("host" or "host:port") that image
	// pulls may reach although their addresses are not public (loopback,
	// private, link-local, this host's); every other registry connection
	// must go to a public address (registry.go).
	RegistryAllow []string
	// AllowScripts permits a debian source's setup script. The script runs
	// as root in a chroot on the build host, which is no isolation from a
	// hostile author: allow it only for trusted recipes (operators, admins).
	AllowScripts bool
	// DebianMirror replaces mmdebstrap's default (deb.debian.org, plus
	// updates and security for stable suites).
	DebianMirror string
	// Logger receives build progress; nil discards it.
	Logger *slog.Logger
}

// Builder builds templates from sources. It is safe for concurrent use;
// builds of any names may run at once.
type Builder struct {
	cfg      BuilderConfig
	log      *slog.Logger
	registry *registryPolicy
}

// NewBuilder checks cfg and returns a Builder. It removes the scratch dirs
// of builds that crashed (a running build's stays: see scratch.go).
func NewBuilder(cfg BuilderConfig) (*Builder, error) {
	if cfg.TemplatesDir == "" || cfg.AgentBinary == "" {
		return nil, fmt.Errorf("template: builder needs a templates dir and an agent binary: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Busybox == "" {
		cfg.Busybox = "/bin/busybox"
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(cfg.TemplatesDir, ".cache")
	}
	if cfg.HeadroomMiB == 0 {
		cfg.HeadroomMiB = 256
	}
	if cfg.MaxContentBytes == 0 {
		cfg.MaxContentBytes = 8 << 30
	}
	registry, err := newRegistryPolicy(cfg.RegistryAllow)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// What crashed builds left would otherwise stay forever.
	removed, err := removeStaleScratch(cfg.TemplatesDir)
	if err != nil {
		return nil, err
	}
	for _, name := range removed {
		log.Info("removed what an interrupted template build left", "dir", name)
	}
	return &Builder{cfg: cfg, log: log, registry: registry}, nil
}

// ProgressFunc receives a build's current step and percent (0-100).
type ProgressFunc func(step string, percent int)

// resolved is a source made ready to populate a root.
type resolved struct {
	digest   string       // the source content's digest: the cache key
	defaults Defaults     // what the image itself asks for (oci)
	config   *ImageConfig // oci run configuration
	// populate fills root, an empty directory, reporting progress within
	// [5, 70].
	populate func(ctx context.Context, root string, bs *buildState) error
	cleanup  func()
}

// buildState is what one build's steps share.
type buildState struct {
	progress ProgressFunc
	log      io.Writer
	tmp      string // private scratch dir, removed with the build
	used     int64  // content bytes written
	limit    int64
	warnings []string
}

func (bs *buildState) logf(format string, args ...any) {
	fmt.Fprintf(bs.log, format+"\n", args...)
}

func (bs *buildState) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	bs.warnings = append(bs.warnings, msg)
	bs.logf("warning: %s", msg)
}

// Build builds template req.Name from req.Source and installs it as the
// newest build of the name. A build whose inputs (source digest, defaults,
// agent, builder settings) match an existing build of the name returns
// that build at once. progress and buildLog may be nil. Failures are
// errdefs-classed; their messages are fit for the tenant who asked (they
// name no host path but the source path given). A failed build leaves
// nothing behind.
func (b *Builder) Build(ctx context.Context, req BuildRequest, progress ProgressFunc, buildLog io.Writer) (Metadata, error) {
	if progress == nil {
		progress = func(string, int) {}
	}
	if buildLog == nil {
		buildLog = io.Discard
	}
	if err := ValidName(req.Name); err != nil {
		return Metadata{}, err
	}
	if req.Name == BaseName {
		return Metadata{}, errdefs.New(errdefs.ErrInvalidArgument, "template name %q is reserved for the built-in template", BaseName)
	}
	started := time.Now()
	progress("resolve source", 1)
	if err := os.MkdirAll(b.cfg.TemplatesDir, 0o755); err != nil {
		return Metadata{}, fmt.Errorf("template: create templates dir: %v: %w", err, errdefs.ErrInternal)
	}
	// All scratch lives in one dir next to the templates, so the final
	// rename stays on one file system and one RemoveAll undoes everything.
	tmp, release, err := newScratch(b.cfg.TemplatesDir, req.Name)
	if err != nil {
		return Metadata{}, err
	}
	defer release()
	bs := &buildState{progress: progress, log: buildLog, tmp: tmp, limit: b.cfg.MaxContentBytes}

	src, err := b.resolve(ctx, req.Source, bs)
	if err != nil {
		return Metadata{}, err
	}
	if src.cleanup != nil {
		defer src.cleanup()
	}
	agent, err := os.ReadFile(b.cfg.AgentBinary)
	if err != nil {
		return Metadata{}, fmt.Errorf("template: read agent binary (build it with `make build`): %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	input, err := b.inputDigest(req, src.digest, agent)
	if err != nil {
		return Metadata{}, err
	}
	if !req.NoCache {
		if m, ok := findInput(b.cfg.TemplatesDir, req.Name, input); ok {
			unlock, err := lockTemplates(b.cfg.TemplatesDir)
			if err != nil {
				return Metadata{}, err
			}
			err = setLatest(Dir(b.cfg.TemplatesDir, req.Name), m.Digest)
			unlock()
			if err != nil {
				return Metadata{}, err
			}
			bs.logf("cached: %s is unchanged since %s", m.Ref(), m.CreatedAt.Format(time.RFC3339))
			progress("cached", 100)
			return m, nil
		}
	}

	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return Metadata{}, fmt.Errorf("template: staging root: %v: %w", err, errdefs.ErrInternal)
	}
	if err := src.populate(ctx, root, bs); err != nil {
		return Metadata{}, err
	}
	progress("install agent", 72)
	if err := b.prepareRoot(root, agent, bs); err != nil {
		return Metadata{}, err
	}
	defaults := buildDefaults(req.Defaults, src.defaults)
	m, err := b.finish(ctx, req.Name, root, input, defaults, bs)
	if err != nil {
		return Metadata{}, err
	}
	m.Source, m.SourceDigest, m.ImageConfig = &req.Source, src.digest, src.config
	progress("install", 98)
	out := filepath.Join(tmp, "out")
	m, err = install(b.cfg.TemplatesDir, m, out)
	if err != nil {
		return Metadata{}, err
	}
	bs.logf("built %s: %d MiB image, %d MiB content, in %s", m.Ref(), m.SizeBytes/mib, m.ContentBytes/mib, time.Since(started).Round(time.Millisecond))
	b.log.InfoContext(ctx, "template built", "template", m.Name, "digest", m.Digest, "size_mib", m.SizeBytes/mib, "took", time.Since(started))
	progress("done", 100)
	return m, nil
}

// Delete removes a template reference: "name" removes every build of the
// name, "name@sha256:…" one build (the next newest becomes current). The
// caller checks that no sandbox or checkpoint uses what it deletes.
func (b *Builder) Delete(ctx context.Context, ref string) error {
	name, digest, err := ParseRef(ref)
	if err != nil {
		return err
	}
	if err := remove(b.cfg.TemplatesDir, name, digest); err != nil {
		return err
	}
	b.log.InfoContext(ctx, "template deleted", "template", ref)
	return nil
}

func (b *Builder) resolve(ctx context.Context, src Source, bs *buildState) (*resolved, error) {
	switch src.Type {
	case SourceOCI:
		return b.resolveOCI(ctx, src, bs)
	case SourceRootfs:
		return b.resolveRootfs(ctx, src, bs)
	case SourceDebian:
		return b.resolveDebian(ctx, src, bs)
	case "":
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "source.type is required: oci, debian or rootfs")
	}
	return nil, errdefs.New(errdefs.ErrInvalidArgument, "source.type %q is unknown: use oci, debian or rootfs", src.Type)
}

func (b *Builder) inputDigest(req BuildRequest, sourceDigest string, agent []byte) (string, error) {
	src, err := json.Marshal(req.Source)
	if err != nil {
		return "", fmt.Errorf("template: encode source: %v: %w", err, errdefs.ErrInternal)
	}
	d, err := json.Marshal(req.Defaults)
	if err != nil {
		return "", fmt.Errorf("template: encode defaults: %v: %w", err, errdefs.ErrInternal)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\nsource %s\nsource-digest %s\nagent %x\nheadroom %d\ndefaults %s\n",
		buildFormat, src, sourceDigest, sha256.Sum256(agent), b.cfg.HeadroomMiB, d)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// buildDefaults layers the request over the image's own defaults over the
// platform's.
func buildDefaults(req, image Defaults) Defaults {
	env := map[string]string{}
	for k, v := range DefaultBaseDefaults.Env {
		env[k] = v
	}
	for k, v := range image.Env {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	d := req
	d.Env = env
	if d.Workdir == "" {
		d.Workdir = image.Workdir
	}
	if d.User == "" {
		d.User = image.User
	}
	if d.Workdir == "" {
		d.Workdir = "/"
	}
	return mergeDefaults(d, DefaultBaseDefaults)
}

// mountPoints are the directories the agent mounts over at boot.
var mountPoints = []struct {
	path string
	mode uint32
}{{"proc", 0o555}, {"sys", 0o555}, {"dev", 0o755}, {"run", 0o755}, {"tmp", 0o1777}}

// prepareRoot makes a populated root bootable by SPACE: the agent at
// AgentPath, the mount points, and a /bin/sh (busybox when the image has
// none). All writes resolve inside root, whatever symlinks the image holds.
func (b *Builder) prepareRoot(root string, agent []byte, bs *buildState) error {
	a, err := newApplier(root, &bs.used, 0)
	if err != nil {
		return err
	}
	defer a.Close()
	a.created, a.ancestors = map[string]bool{}, map[string]bool{}
	a.what = "prepare"
	for _, mp := range mountPoints {
		fd, err := a.openDir(mp.path, false)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if err := a.mkdir(a.root, mp.path, 0, 0, mp.mode); err != nil {
			return a.entryErr(mp.path, err)
		}
	}
	if err := a.writeFile(strings.TrimPrefix(AgentPath, "/"), agent, 0o755); err != nil {
		return err
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	if fd, err := unix.Openat2(a.root, "bin/sh", &how); err == nil {
		unix.Close(fd)
		return nil
	}
	busybox, err := os.ReadFile(b.cfg.Busybox)
	if err != nil {
		bs.warn("the image has no /bin/sh: shell commands will fail until one is installed")
		return nil
	}
	const shPath = "usr/local/lib/space/busybox"
	if err := a.writeFile(shPath, busybox, 0o755); err != nil {
		return err
	}
	pfd, err := a.openDir("bin", true)
	if err != nil {
		return a.entryErr("bin/sh", err)
	}
	defer unix.Close(pfd)
	_ = unix.Unlinkat(pfd, "sh", 0) // a dangling link
	if err := unix.Symlinkat("/"+shPath, pfd, "sh"); err != nil {
		return a.entryErr("bin/sh", err)
	}
	bs.warn("the image has no /bin/sh: added busybox's as /bin/sh")
	return nil
}

// writeFile writes a root-owned file at rel inside the root, replacing
// what is there.
func (a *applier) writeFile(rel string, body []byte, mode uint32) error {
	dir, base := filepath.Split(rel)
	pfd, err := a.openDir(strings.TrimSuffix(dir, "/"), true)
	if err != nil {
		return a.entryErr(rel, err)
	}
	defer unix.Close(pfd)
	if err := removeAllAt(pfd, base); err != nil {
		return a.entryErr(rel, err)
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return a.entryErr(rel, err)
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	if _, err := f.Write(body); err != nil {
		return a.entryErr(rel, err)
	}
	if err := unix.Fchown(fd, 0, 0); err != nil {
		return a.entryErr(rel, err)
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return a.entryErr(rel, err)
	}
	return nil
}

// finish turns a prepared root into an image in <tmp>/out with its
// metadata (not yet installed).
func (b *Builder) finish(ctx context.Context, name, root, input string, d Defaults, bs *buildState) (Metadata, error) {
	content, entries, err := treeUsage(root)
	if err != nil {
		return Metadata{}, fmt.Errorf("template: measure content: %v: %w", err, errdefs.ErrInternal)
	}
	if content > b.cfg.MaxContentBytes {
		return Metadata{}, errdefs.New(errdefs.ErrInvalidArgument, "the image content (%d MiB) exceeds the size limit of %d MiB",
			content/mib, b.cfg.MaxContentBytes/mib)
	}
	size := content + content/8 + int64(b.cfg.HeadroomMiB)*mib + 16*mib // metadata, journal, headroom
	size = (size + mib - 1) / mib * mib
	inodes := entries + entries/4 + 4096
	out := filepath.Join(bs.tmp, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		return Metadata{}, fmt.Errorf("template: output dir: %v: %w", err, errdefs.ErrInternal)
	}
	image := filepath.Join(out, ImageFile)
	bs.progress("make ext4", 75)
	bs.logf("making a %d MiB ext4 image (%d MiB content, %d entries)", size/mib, content/mib, entries)
	if err := makeExt4(ctx, root, image, size, input, inodes); err != nil {
		var pub *errdefs.Public
		if errors.As(err, &pub) || errors.Is(err, errdefs.ErrCancelled) {
			return Metadata{}, err
		}
		return Metadata{}, errdefs.New(errdefs.ErrInternal, "making the ext4 image failed").WithCause(err)
	}
	if d.DiskMiB < int(size/mib) {
		d.DiskMiB = int(size / mib)
	}
	bs.progress("digest", 90)
	digest, err := imageDigest(ctx, image, d)
	if err != nil {
		return Metadata{}, err
	}
	return Metadata{
		Name: name, Digest: digest, SizeBytes: size, ContentBytes: content, Defaults: d,
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond), InputDigest: input, Warnings: bs.warnings,
	}, nil
}
