package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// rootFormat versions how a root becomes a layer; bump it when writeLayer
// or the recipe's meaning changes, so cached roots are made again.
const rootFormat = 1

// recipe is everything a Debian root depends on. Its hash names the cached
// layer, so a changed package list, suite, mirror or hook builds a new one.
type recipe struct {
	Format   int      `json:"format"`
	Suite    string   `json:"suite"`
	Variant  string   `json:"variant"`
	Mirror   string   `json:"mirror,omitempty"`
	Packages []string `json:"packages"`
	// Hooks are mmdebstrap --customize-hook commands ($1 is the root).
	Hooks []string `json:"hooks,omitempty"`
}

// dpkgExcludes keep documentation out of the roots (but not the copyright
// files, which the licences ask to ship with the binaries).
var dpkgExcludes = []string{
	"--dpkgopt=path-exclude=/usr/share/man/*",
	"--dpkgopt=path-exclude=/usr/share/info/*",
	"--dpkgopt=path-exclude=/usr/share/locale/*",
	"--dpkgopt=path-exclude=/usr/share/doc/*",
	"--dpkgopt=path-include=/usr/share/doc/*/copyright",
}

func (r recipe) key() string {
	r.Packages = append([]string(nil), r.Packages...)
	sort.Strings(r.Packages)
	b, _ := json.Marshal(r)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// rootCache makes Debian roots with mmdebstrap and keeps each as a ready
// layer under dir/roots/<recipe key>/, so a warm build reads no mirror and
// writes no tar.
type rootCache struct {
	dir string
	log *slog.Logger
}

// layer returns the cached layer of r, building it first when missing.
func (c rootCache) layer(r recipe) (string, layerInfo, error) {
	key := r.key()
	final := filepath.Join(c.dir, "roots", key)
	blob, infoPath := filepath.Join(final, "layer.tar.gz"), filepath.Join(final, "layer.json")
	if err := os.MkdirAll(filepath.Join(c.dir, "roots"), 0o700); err != nil {
		return "", layerInfo{}, fmt.Errorf("root cache: %w", err)
	}
	// One builder per recipe at a time; the others wait and then find it.
	unlock, err := lockFile(filepath.Join(c.dir, "roots", key+".lock"))
	if err != nil {
		return "", layerInfo{}, err
	}
	defer unlock()
	if li, err := loadInfo(infoPath); err == nil {
		if fi, err := os.Stat(blob); err == nil && fi.Size() == li.Size {
			c.log.Info("root: cached", "suite", r.Suite, "packages", len(r.Packages), "key", key[:12])
			return blob, li, nil
		}
	}
	start := time.Now()
	stage, err := os.MkdirTemp(filepath.Join(c.dir, "roots"), ".build-")
	if err != nil {
		return "", layerInfo{}, fmt.Errorf("root cache: %w", err)
	}
	defer os.RemoveAll(stage)
	root := filepath.Join(stage, "root")
	if err := c.mmdebstrap(r, root); err != nil {
		return "", layerInfo{}, err
	}
	li, err := writeLayer(layerSpec{trees: []tree{{src: root, skipChildren: []string{"dev", "proc", "sys", "run", "tmp"}}}},
		filepath.Join(stage, "layer.tar.gz"))
	if err != nil {
		return "", layerInfo{}, err
	}
	if err := os.RemoveAll(root); err != nil {
		return "", layerInfo{}, fmt.Errorf("root cache: %w", err)
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(filepath.Join(stage, "recipe.json"), b, 0o644); err != nil {
		return "", layerInfo{}, err
	}
	if err := saveInfo(filepath.Join(stage, "layer.json"), li); err != nil {
		return "", layerInfo{}, err
	}
	if err := os.RemoveAll(final); err != nil {
		return "", layerInfo{}, err
	}
	// Renamed last: a half-made root is never found.
	if err := os.Rename(stage, final); err != nil {
		return "", layerInfo{}, fmt.Errorf("root cache: %w", err)
	}
	c.log.Info("root: built", "suite", r.Suite, "packages", len(r.Packages), "key", key[:12],
		"layer_mib", li.Size>>20, "took", time.Since(start).Round(time.Second))
	return blob, li, nil
}

// mmdebstrap makes r's root at dir, in a private mount namespace so the
// /proc, /sys and /dev mounts it makes in the chroot never outlive it.
// SOURCE_DATE_EPOCH=0 makes what Debian's tools stamp into files fixed.
func (c rootCache) mmdebstrap(r recipe, dir string) error {
	bin, err := exec.LookPath("mmdebstrap")
	if err != nil {
		return errors.New("mmdebstrap not found: run `make setup` (Debian package mmdebstrap)")
	}
	args := []string{"--mount", "--propagation", "private", "--", bin,
		"--mode=root", "--format=directory", "--variant=" + r.Variant,
		`--aptopt=Acquire::Retries "3"`, "--aptopt=APT::Install-Recommends false"}
	args = append(args, dpkgExcludes...)
	if len(r.Packages) > 0 {
		args = append(args, "--include="+strings.Join(r.Packages, ","))
	}
	// .debs are kept between builds of other recipes of the same suite.
	apt := filepath.Join(c.dir, "apt", r.Suite)
	if err := os.MkdirAll(apt, 0o755); err != nil {
		return err
	}
	args = append(args,
		`--setup-hook=mkdir -p "$1"/var/cache/apt/archives/`,
		"--setup-hook=sync-in "+apt+" /var/cache/apt/archives/",
		"--customize-hook=sync-out /var/cache/apt/archives "+apt)
	for _, h := range r.Hooks {
		args = append(args, "--customize-hook="+h)
	}
	args = append(args, r.Suite, dir)
	if r.Mirror != "" {
		args = append(args, r.Mirror)
	}
	c.log.Info("root: mmdebstrap", "suite", r.Suite, "variant", r.Variant, "packages", strings.Join(r.Packages, ","))
	cmd := exec.Command("unshare", args...)
	logFile, err := os.Create(dir + ".log")
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=0", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C.UTF-8")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mmdebstrap %s: %v\n%s", r.Suite, err, tail(dir+".log", 20))
	}
	return nil
}

// tail returns the last n lines of a file, for an error message.
func tail(p string, n int) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// lockFile takes an exclusive flock on p and returns its release.
func lockFile(p string) (func(), error) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}
