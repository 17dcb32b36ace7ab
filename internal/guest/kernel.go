// Package guest owns the guest boot artifacts: it finds the cached Debian
// kernel (vmlinuz and its modules, fetched by scripts/setup.sh) and packs the
// initramfs whose /init is the space-agent together with the kernel modules
// the agent loads before it mounts the sandbox's root disk.
//
// It builds files only. It does not start VMs (internal/vmm does) and does not
// know what the agent does once it runs.
package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
)

// DefaultKernelDir is where scripts/setup.sh caches kernels, one directory
// per kernel release: <dir>/<release>/{vmlinuz,lib/modules/<release>/}.
const DefaultKernelDir = "/var/lib/space/kernel"

// KernelDirEnv names the environment variable that overrides DefaultKernelDir
// (read by scripts/setup.sh too).
const KernelDirEnv = "SPACE_KERNEL_DIR"

// KernelDirFromEnv returns $SPACE_KERNEL_DIR, or DefaultKernelDir when unset.
func KernelDirFromEnv() string {
	if d := os.Getenv(KernelDirEnv); d != "" {
		return d
	}
	return DefaultKernelDir
}

// Kernel is one cached guest kernel.
type Kernel struct {
	// Version is the kernel release (uname -r), e.g. "6.1.0-57-cloud-amd64".
	Version string
	// Vmlinuz is the compressed boot image (bzImage) QEMU boots with -kernel.
	Vmlinuz string
	// ModulesDir is lib/modules/<Version>; it holds kernel/… with the .ko files.
	ModulesDir string
}

// Locate finds a cached kernel. dir is either the cache root (the newest
// complete release in it wins) or one release directory. A missing kernel is
// ErrFailedPrecondition naming how to get one.
func Locate(dir string) (Kernel, error) {
	if k, ok := kernelAt(dir); ok {
		return k, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return Kernel{}, fmt.Errorf("guest: read kernel dir %s: %v: %w", dir, err, errdefs.ErrInternal)
	}
	var found []Kernel
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if k, ok := kernelAt(filepath.Join(dir, e.Name())); ok {
			found = append(found, k)
		}
	}
	if len(found) == 0 {
		return Kernel{}, fmt.Errorf("guest: no kernel cached in %s: run `make setup` "+
			"(scripts/setup.sh fetches Debian's linux-image-cloud-amd64; set %s to use another cache): %w",
			dir, KernelDirEnv, errdefs.ErrFailedPrecondition)
	}
	sort.Slice(found, func(i, j int) bool { return versionLess(found[i].Version, found[j].Version) })
	return found[len(found)-1], nil
}

// kernelAt reports whether d is a complete release directory.
func kernelAt(d string) (Kernel, bool) {
	version := filepath.Base(filepath.Clean(d))
	k := Kernel{
		Version:    version,
		Vmlinuz:    filepath.Join(d, "vmlinuz"),
		ModulesDir: filepath.Join(d, "lib", "modules", version),
	}
	if fi, err := os.Stat(k.Vmlinuz); err != nil || !fi.Mode().IsRegular() {
		return Kernel{}, false
	}
	if fi, err := os.Stat(filepath.Join(k.ModulesDir, "kernel")); err != nil || !fi.IsDir() {
		return Kernel{}, false
	}
	return k, true
}

// versionLess orders kernel releases the way `sort -V` does for the usual
// "6.1.0-57-cloud-amd64" shape: numeric runs compare as numbers.
func versionLess(a, b string) bool {
	as, bs := splitVersion(a), splitVersion(b)
	for i := 0; i < len(as) && i < len(bs); i++ {
		if as[i] == bs[i] {
			continue
		}
		an, aerr := strconv.Atoi(as[i])
		bn, berr := strconv.Atoi(bs[i])
		if aerr == nil && berr == nil {
			return an < bn
		}
		return as[i] < bs[i]
	}
	return len(as) < len(bs)
}

func splitVersion(v string) []string {
	var parts []string
	start := 0
	isDigit := func(c byte) bool { return c >= '0' && c <= '9' }
	for i := 1; i <= len(v); i++ {
		if i == len(v) || isDigit(v[i]) != isDigit(v[i-1]) {
			parts = append(parts, v[start:i])
			start = i
		}
	}
	return parts
}
