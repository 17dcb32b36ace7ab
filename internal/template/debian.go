package template

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

var (
	suiteRE   = regexp.MustCompile(`^[a-z][a-z0-9-]{1,31}$`)
	packageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{0,127}$`)
	variants  = map[string]bool{"essential": true, "apt": true, "minbase": true, "buildd": true, "required": true, "important": true, "standard": true}
)

// maxScript caps a recipe's setup script.
const maxScript = 64 << 10

// resolveDebian checks a Debian recipe. Its digest is a hash of the
// normalised recipe: the same recipe is the same template until NoCache
// asks for newer packages.
func (b *Builder) resolveDebian(_ context.Context, src Source, bs *buildState) (*resolved, error) {
	if src.Path != "" || src.Image != "" {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "a debian source takes suite, packages and script, not path or image")
	}
	if !suiteRE.MatchString(src.Suite) {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "debian suite %q is invalid (e.g. bookworm)", src.Suite)
	}
	variant := src.Variant
	if variant == "" {
		variant = "minbase"
	}
	if !variants[variant] {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "debian variant %q is unknown (use essential, apt, minbase, buildd or standard)", src.Variant)
	}
	pkgs := append([]string(nil), src.Packages...)
	for _, p := range pkgs {
		if !packageRE.MatchString(p) {
			return nil, errdefs.New(errdefs.ErrInvalidArgument, "debian package name %q is invalid", p)
		}
	}
	sort.Strings(pkgs)
	if len(src.Script) > maxScript {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "the setup script is larger than %d KiB", maxScript>>10)
	}
	if src.Script != "" && !b.cfg.AllowScripts {
		return nil, errdefs.New(errdefs.ErrPermissionDenied, "setup scripts are not allowed on this server")
	}
	mmdebstrap, err := exec.LookPath("mmdebstrap")
	if err != nil {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "debian templates need mmdebstrap, which this host lacks (run `make setup`)")
	}
	recipe, _ := json.Marshal(struct {
		Suite, Variant, Mirror string
		Packages               []string
		Script                 string
	}{src.Suite, variant, b.cfg.DebianMirror, pkgs, src.Script})
	sum := sha256.Sum256(recipe)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	bs.logf("source: debian %s (%s) with %d packages, recipe %s", src.Suite, variant, len(pkgs), digest)

	return &resolved{digest: digest, populate: func(ctx context.Context, root string, bs *buildState) error {
		args := []string{"--mode=root", "--format=directory", "--variant=" + variant,
			`--aptopt=Acquire::Retries "3"`, "--aptopt=APT::Install-Recommends false"}
		if len(pkgs) > 0 {
			args = append(args, "--include="+strings.Join(pkgs, ","))
		}
		if cache := b.aptCache(src.Suite, bs); cache != "" {
			args = append(args,
				`--setup-hook=mkdir -p "$1"/var/cache/apt/archives/`,
				"--setup-hook=sync-in "+cache+" /var/cache/apt/archives/",
				"--customize-hook=sync-out /var/cache/apt/archives "+cache)
		}
		if src.Script != "" {
			script := filepath.Join(bs.tmp, "setup.sh")
			if err := os.WriteFile(script, []byte(src.Script), 0o755); err != nil {
				return fmt.Errorf("template: write setup script: %v: %w", err, errdefs.ErrInternal)
			}
			args = append(args,
				"--customize-hook=upload "+script+" /tmp/space-setup.sh",
				`--customize-hook=chroot "$1" /bin/sh -e /tmp/space-setup.sh`,
				`--customize-hook=rm -f "$1"/tmp/space-setup.sh`)
		}
		args = append(args, src.Suite, root)
		if b.cfg.DebianMirror != "" {
			args = append(args, b.cfg.DebianMirror)
		}
		bs.progress("debootstrap", 5)
		out := &mmdebstrapLog{w: bs.log, progress: bs.progress, redact: []string{root, bs.tmp, b.cfg.CacheDir}}
		// A private mount namespace: the /proc, /sys and /dev mounts
		// mmdebstrap makes in the chroot vanish with it, even if it is
		// killed, so removing a failed build never reaches host devices.
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			return errdefs.New(errdefs.ErrFailedPrecondition, "debian templates need unshare (package util-linux)")
		}
		cmd := exec.CommandContext(ctx, unshare, append([]string{"--mount", "--propagation", "private", "--", mmdebstrap}, args...)...)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // mmdebstrap cleans up on TERM
		cmd.WaitDelay = 30 * time.Second
		cmd.Stdout, cmd.Stderr = out, out
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C.UTF-8")
		err = cmd.Run()
		out.flush()
		if ctx.Err() != nil {
			return fmt.Errorf("template: debian build: %w", errdefs.ErrCancelled)
		}
		if err != nil {
			msg := "mmdebstrap failed"
			if last := out.lastError(); last != "" {
				msg += ": " + last
			}
			return errdefs.New(errdefs.ErrFailedPrecondition, "building debian %s failed (%s); see the build log", src.Suite, msg).WithCause(err)
		}
		return nil
	}}, nil
}

// aptCache returns a per-suite directory that keeps downloaded .debs
// between builds, or "" when it cannot be used.
func (b *Builder) aptCache(suite string, bs *buildState) string {
	dir := filepath.Join(b.cfg.CacheDir, "apt", suite)
	if strings.ContainsAny(dir, " \t\n\"'\\$") { // mmdebstrap splits special hooks on spaces
		return ""
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		bs.logf("apt cache unavailable: %v", err)
		return ""
	}
	return dir
}

// mmdebstrapLog forwards mmdebstrap's output to the build log line by
// line, hiding host paths, and turns its "I: …" phase lines into progress.
type mmdebstrapLog struct {
	mu       sync.Mutex
	w        io.Writer
	progress ProgressFunc
	redact   []string
	buf      []byte
	lastErr  string
}

var mmdebstrapPhases = []struct {
	prefix, step string
	percent      int
}{
	{"I: running apt-get update", "apt update", 8},
	{"I: downloading packages", "download packages", 15},
	{"I: extracting archives", "extract packages", 30},
	{"I: installing essential packages", "install essential packages", 40},
	{"I: installing remaining packages", "install packages", 50},
	{"I: running --customize-hook", "run setup script", 62},
	{"I: cleaning package lists", "clean up", 68},
}

func (l *mmdebstrapLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexAny(l.buf, "\n\r")
		if i < 0 {
			break
		}
		l.line(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

func (l *mmdebstrapLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.line(string(l.buf))
		l.buf = nil
	}
}

func (l *mmdebstrapLog) line(s string) {
	if strings.TrimSpace(s) == "" {
		return
	}
	for _, r := range l.redact {
		if r != "" {
			s = strings.ReplaceAll(s, r, "<build>")
		}
	}
	for _, ph := range mmdebstrapPhases {
		if strings.HasPrefix(s, ph.prefix) {
			l.progress(ph.step, ph.percent)
		}
	}
	if strings.HasPrefix(s, "E: ") {
		l.lastErr = strings.TrimPrefix(s, "E: ")
	}
	fmt.Fprintln(l.w, s)
}

func (l *mmdebstrapLog) lastError() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lastErr) > 300 {
		return l.lastErr[:300] + "…"
	}
	return l.lastErr
}
