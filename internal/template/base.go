package template

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// BaseName is the name of the built-in template.
const BaseName = "base"

// AgentPath is where every template image carries the space-agent binary, so
// the agent can re-exec itself from the root disk after it has switched root.
const AgentPath = "/usr/local/bin/space-agent"

// baseFormat changes whenever the staged layout changes, so images built by
// older code are rebuilt.
const baseFormat = "space-base-v2"

// BaseOptions configures BuildBase.
type BaseOptions struct {
	// TemplatesDir holds all templates; required.
	TemplatesDir string
	// AgentBinary is the static space-agent executable; required.
	AgentBinary string
	// Busybox is a static busybox binary; default /bin/busybox (Debian's
	// busybox-static).
	Busybox string
	// Bash is a static bash, installed as /bin/bash; default
	// /bin/bash-static (Debian's bash-static).
	Bash string
	// SizeMiB is the image size; it grows when the content needs more.
	// Default 256.
	SizeMiB int
	// Defaults are the runtime defaults recorded for the template; zero
	// fields take DefaultBaseDefaults' values, DiskMiB the image size.
	Defaults Defaults
	// Logger receives build progress; nil discards it.
	Logger *slog.Logger
}

// DefaultBaseDefaults are the runtime defaults of the base template.
var DefaultBaseDefaults = Defaults{
	Vcpus:     1,
	MemoryMiB: 256,
	Env:       map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	Workdir:   "/root",
	User:      "root",
}

// BuildBase builds (or finds cached) the `base` template: busybox with all
// its applets, a static bash, root and an unprivileged `user` (uid 1000),
// and the agent at AgentPath. Unchanged inputs return the existing image without work.
// Building needs root, to give files their owners.
func BuildBase(ctx context.Context, opts BaseOptions) (Metadata, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.TemplatesDir == "" || opts.AgentBinary == "" {
		return Metadata{}, fmt.Errorf("template: base needs a templates dir and an agent binary: %w", errdefs.ErrInvalidArgument)
	}
	if opts.Busybox == "" {
		opts.Busybox = "/bin/busybox"
	}
	if opts.Bash == "" {
		opts.Bash = "/bin/bash-static"
	}
	if opts.SizeMiB == 0 {
		opts.SizeMiB = 256
	}
	defaults := mergeDefaults(opts.Defaults, DefaultBaseDefaults)

	busybox, err := os.ReadFile(opts.Busybox)
	if err != nil {
		return Metadata{}, fmt.Errorf("template: read busybox (package busybox-static; run `make setup`): %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	bash, err := os.ReadFile(opts.Bash)
	if err != nil {
		return Metadata{}, fmt.Errorf("template: read bash (package bash-static; run `make setup`): %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	agent, err := os.ReadFile(opts.AgentBinary)
	if err != nil {
		return Metadata{}, fmt.Errorf("template: read agent binary (build it with `make build`): %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	input, err := baseInputDigest(busybox, bash, agent, opts.SizeMiB, defaults)
	if err != nil {
		return Metadata{}, err
	}
	if m, ok := findInput(opts.TemplatesDir, BaseName, input); ok {
		if latest, err := Load(opts.TemplatesDir, BaseName); err != nil || latest.Digest != m.Digest {
			unlock, err := lockTemplates(opts.TemplatesDir)
			if err != nil {
				return Metadata{}, err
			}
			err = setLatest(Dir(opts.TemplatesDir, BaseName), m.Digest)
			unlock()
			if err != nil {
				return Metadata{}, err
			}
		}
		log.DebugContext(ctx, "base template cached", "digest", m.Digest)
		return m, nil
	}

	if err := os.MkdirAll(opts.TemplatesDir, 0o755); err != nil {
		return Metadata{}, fmt.Errorf("template: create templates dir: %v: %w", err, errdefs.ErrInternal)
	}
	tmp, release, err := newScratch(opts.TemplatesDir, BaseName)
	if err != nil {
		return Metadata{}, err
	}
	defer release()
	staging, out := filepath.Join(tmp, "root"), filepath.Join(tmp, "out")
	for _, d := range []string{staging, out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return Metadata{}, fmt.Errorf("template: staging dir: %v: %w", err, errdefs.ErrInternal)
		}
	}
	if err := stageBase(ctx, staging, opts.Busybox, busybox, bash, agent); err != nil {
		return Metadata{}, err
	}
	if err := fixTimes(staging); err != nil {
		return Metadata{}, err
	}
	content, err := treeSize(staging)
	if err != nil {
		return Metadata{}, fmt.Errorf("template: measure staging: %v: %w", err, errdefs.ErrInternal)
	}
	size := imageSize(content, int64(opts.SizeMiB)*mib)
	if defaults.DiskMiB == 0 {
		defaults.DiskMiB = int(size / mib)
	}
	image := filepath.Join(out, ImageFile)
	if err := MakeExt4(ctx, staging, image, size, input); err != nil {
		return Metadata{}, err
	}
	if err := fixChangeTimes(ctx, staging, image); err != nil {
		return Metadata{}, err
	}
	digest, err := imageDigest(ctx, image, defaults)
	if err != nil {
		return Metadata{}, err
	}
	m, err := install(opts.TemplatesDir, Metadata{
		Name:         BaseName,
		Digest:       digest,
		SizeBytes:    size,
		ContentBytes: content,
		Defaults:     defaults,
		CreatedAt:    time.Now().UTC().Truncate(time.Millisecond),
		Source:       &Source{Type: SourceBase},
		Warnings:     slices.Clone(baseNotes),
		InputDigest:  input,
	}, out)
	if err != nil {
		return Metadata{}, err
	}
	// Images of the layout before per-digest builds: nothing reads them now.
	os.Remove(filepath.Join(Dir(opts.TemplatesDir, BaseName), ImageFile))
	os.Remove(filepath.Join(Dir(opts.TemplatesDir, BaseName), MetadataFile))
	log.InfoContext(ctx, "base template built", "digest", digest, "size_mib", size/mib)
	return m, nil
}

func mergeDefaults(d, def Defaults) Defaults {
	if d.Vcpus == 0 {
		d.Vcpus = def.Vcpus
	}
	if d.MemoryMiB == 0 {
		d.MemoryMiB = def.MemoryMiB
	}
	if d.DiskMiB == 0 {
		d.DiskMiB = def.DiskMiB
	}
	if d.Env == nil {
		d.Env = make(map[string]string, len(def.Env))
		for k, v := range def.Env {
			d.Env[k] = v
		}
	}
	if d.Workdir == "" {
		d.Workdir = def.Workdir
	}
	if d.User == "" {
		d.User = def.User
	}
	return d
}

func baseInputDigest(busybox, bash, agent []byte, sizeMiB int, d Defaults) (string, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("template: encode defaults: %v: %w", err, errdefs.ErrInternal)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\nbusybox %x\nbash %x\nagent %x\nsize %d\ndefaults %s\n",
		baseFormat, sha256.Sum256(busybox), sha256.Sum256(bash), sha256.Sum256(agent), sizeMiB, b)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// baseFiles are the small text files of the base image.
var baseFiles = []struct {
	path string
	mode os.FileMode
	body string
}{
	{"etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\n" +
		"user:x:1000:1000:user:/home/user:/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
	{"etc/group", 0o644, "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n"},
	{"etc/shadow", 0o640, "root:*:19000:0:99999:7:::\nuser:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n"},
	{"etc/hosts", 0o644, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
	{"etc/hostname", 0o644, "sandbox\n"},
	{"etc/resolv.conf", 0o644, "# Written by space-agent when the sandbox starts.\n"},
	{"etc/profile", 0o644, "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"},
	{"etc/os-release", 0o644, "NAME=\"SPACE base\"\nID=space-base\nPRETTY_NAME=\"SPACE base (busybox)\"\n"},
}

// baseNotes are what a tenant should know of base's tools. Debian's
// busybox 1.35 wget crashes (SIGSEGV) whenever -T is given, before it
// connects; Debian ships no static curl or wget to put beside it.
var baseNotes = []string{
	"wget is busybox 1.35's: its -T (timeout) option crashes it; bound a download with `timeout N wget …` instead. There is no curl.",
}

// stageBase lays out the base root filesystem under root.
func stageBase(ctx context.Context, root, busyboxPath string, busybox, bash, agent []byte) error {
	applets, err := busyboxApplets(ctx, busyboxPath)
	if err != nil {
		return err
	}
	dirs := []struct {
		path string
		mode os.FileMode
		uid  int
	}{
		{"bin", 0o755, 0}, {"etc", 0o755, 0}, {"usr", 0o755, 0}, {"usr/local", 0o755, 0},
		{"usr/local/bin", 0o755, 0}, {"usr/local/sbin", 0o755, 0},
		{"root", 0o700, 0}, {"home", 0o755, 0}, {"home/user", 0o755, 1000},
		{"tmp", os.ModeSticky | 0o777, 0}, {"var", 0o755, 0}, {"var/tmp", os.ModeSticky | 0o777, 0}, {"var/log", 0o755, 0},
		{"proc", 0o555, 0}, {"sys", 0o555, 0}, {"dev", 0o755, 0}, {"run", 0o755, 0}, {"mnt", 0o755, 0},
	}
	for _, d := range dirs {
		p := filepath.Join(root, d.path)
		if err := os.Mkdir(p, d.mode); err != nil && !errors.Is(err, os.ErrExist) {
			return stageErr(err)
		}
		if err := os.Chmod(p, d.mode); err != nil { // umask and sticky bits
			return stageErr(err)
		}
		if err := os.Lchown(p, d.uid, d.uid); err != nil {
			return chownErr(err)
		}
	}
	links := map[string]string{"sbin": "bin", "usr/bin": "../bin", "usr/sbin": "../bin"}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			return stageErr(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), busybox, 0o755); err != nil {
		return stageErr(err)
	}
	for _, a := range applets {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil && !errors.Is(err, os.ErrExist) {
			return stageErr(err)
		}
	}
	// bash beside busybox's sh (which stays /bin/sh): scripts written for
	// bash, and tools that run `bash -c`, work in base too.
	bashPath := filepath.Join(root, "bin", "bash")
	if err := os.Remove(bashPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return stageErr(err)
	}
	if err := os.WriteFile(bashPath, bash, 0o755); err != nil {
		return stageErr(err)
	}
	if err := os.WriteFile(filepath.Join(root, AgentPath), agent, 0o755); err != nil {
		return stageErr(err)
	}
	for _, f := range baseFiles {
		p := filepath.Join(root, f.path)
		if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
			return stageErr(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			return stageErr(err)
		}
	}
	return nil
}

// busyboxApplets lists the applet names the busybox binary provides.
func busyboxApplets(ctx context.Context, busybox string) ([]string, error) {
	out, err := exec.CommandContext(ctx, busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("template: %s --list: %v: %w", busybox, err, errdefs.ErrFailedPrecondition)
	}
	var applets []string
	for _, line := range strings.Split(string(bytes.TrimSpace(out)), "\n") {
		a := strings.TrimSpace(line)
		if a == "" || a == "busybox" || strings.ContainsAny(a, "/\x00") || a == "." || a == ".." {
			continue
		}
		applets = append(applets, a)
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("template: %s lists no applets: %w", busybox, errdefs.ErrFailedPrecondition)
	}
	return applets, nil
}

func stageErr(err error) error {
	return fmt.Errorf("template: stage base: %v: %w", err, errdefs.ErrInternal)
}

func chownErr(err error) error {
	if errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("template: building an image needs root to set file owners: %w", errdefs.ErrFailedPrecondition)
	}
	return stageErr(err)
}

// fixChangeTimes sets the change and access times of every inode of image
// that staging's tree made to the epoch's first second, with debugfs:
// mkfs.ext4 -d copies each source file's ctime, which no call can set on
// the source, and its atime, which mkfs's own reading of a directory moves.
func fixChangeTimes(ctx context.Context, staging, image string) error {
	var script strings.Builder
	err := filepath.WalkDir(staging, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(staging, path)
		if err != nil {
			return err
		}
		if strings.ContainsAny(rel, "\"\n") {
			return fmt.Errorf("template: staged name %q cannot be given to debugfs: %w", rel, errdefs.ErrInternal)
		}
		name := "/" + strings.TrimPrefix(rel, ".")
		// atime too: mkfs reading a staged directory touched it.
		fmt.Fprintf(&script, "sif \"%s\" ctime 0x1\nsif \"%s\" atime 0x1\n", name, name)
		return nil
	})
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "debugfs", "-w", "-f", "-", image)
	cmd.Env = append(os.Environ(), "E2FSPROGS_FAKE_TIME=1", "SOURCE_DATE_EPOCH=1") // the superblock's write time
	cmd.Stdin = strings.NewReader(script.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("template: debugfs: %v: %s: %w", err, bytes.TrimSpace(out), errdefs.ErrInternal)
	}
	return nil
}

// fixTimes sets every staged file's access and modification times to the
// epoch's first second (as SOURCE_DATE_EPOCH=1), symlinks themselves
// included: mkfs.ext4 -d copies them into the image, so without this two
// builds of the same inputs differ by when they ran, and the base's digest
// with them. In a cluster every control replica and worker builds base
// itself and a sandbox names it by digest, so the digests must agree.
func fixTimes(root string) error {
	epoch := []unix.Timespec{{Sec: 1}, {Sec: 1}}
	return filepath.WalkDir(root, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, epoch, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("template: fix times of %s: %v: %w", path, err, errdefs.ErrInternal)
		}
		return nil
	})
}
