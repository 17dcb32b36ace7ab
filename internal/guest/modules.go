package guest

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
)

// DefaultModules are the modules a sandbox needs, by module name. Their
// dependencies are added and ordered by ResolveModules. Built-in drivers
// (ext4, devtmpfs, rng-core on Debian's cloud kernel) need no entry.
var DefaultModules = []string{
	"virtio_ring", "virtio", "virtio_mmio",
	"virtio_blk", "virtio_console", "virtio_rng",
	"failover", "net_failover", "virtio_net",
	"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport",
	"virtio_balloon",
}

// Module is one kernel module file.
type Module struct {
	// Name is the module name with '-' folded to '_' (as the kernel does).
	Name string
	// Path is the file path relative to the kernel's ModulesDir, e.g.
	// "kernel/drivers/virtio/virtio.ko".
	Path string
	// Depends are the names of the modules it needs loaded first.
	Depends []string
}

// moduleName folds a file or module name to the kernel's canonical form.
func moduleName(s string) string {
	s = strings.TrimSuffix(filepath.Base(s), ".ko")
	return strings.ReplaceAll(s, "-", "_")
}

// ResolveModules returns the named modules of kernel k and everything they
// depend on, in an order the agent can load them one by one: every module
// comes after its dependencies; otherwise the order of names is kept.
// Dependencies come from each file's .modinfo section, so no depmod output
// is needed.
func ResolveModules(k Kernel, names []string) ([]Module, error) {
	index, err := indexModules(k)
	if err != nil {
		return nil, err
	}
	var order []Module
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name, from string) error
	visit = func(name, from string) error {
		name = moduleName(name)
		switch state[name] {
		case 2:
			return nil
		case 1:
			return fmt.Errorf("guest: module dependency cycle at %s: %w", name, errdefs.ErrInternal)
		}
		path, ok := index[name]
		if !ok {
			what := "requested"
			if from != "" {
				what = "needed by " + from
			}
			return fmt.Errorf("guest: module %s (%s) not found under %s (built in or missing from kernel %s?): %w",
				name, what, k.ModulesDir, k.Version, errdefs.ErrFailedPrecondition)
		}
		state[name] = 1
		deps, err := moduleDepends(filepath.Join(k.ModulesDir, path))
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d, name); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, Module{Name: name, Path: path, Depends: deps})
		return nil
	}
	for _, n := range names {
		if err := visit(n, ""); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// indexModules maps module names to paths relative to k.ModulesDir.
func indexModules(k Kernel) (map[string]string, error) {
	index := map[string]string{}
	root := filepath.Join(k.ModulesDir, "kernel")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".ko") {
			return nil
		}
		rel, err := filepath.Rel(k.ModulesDir, p)
		if err != nil {
			return err
		}
		index[moduleName(p)] = filepath.ToSlash(rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("guest: index modules of %s: %v: %w", k.Version, err, errdefs.ErrInternal)
	}
	return index, nil
}

// moduleDepends reads the "depends=" entry of a module's .modinfo section.
func moduleDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("guest: open module %s: %v: %w", path, err, errdefs.ErrInternal)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("guest: module %s has no .modinfo section: %w", path, errdefs.ErrInternal)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("guest: read .modinfo of %s: %v: %w", path, err, errdefs.ErrInternal)
	}
	var deps []string
	for _, kv := range bytes.Split(data, []byte{0}) {
		v, ok := bytes.CutPrefix(kv, []byte("depends="))
		if !ok {
			continue
		}
		for _, d := range strings.Split(string(v), ",") {
			if d = strings.TrimSpace(d); d != "" {
				deps = append(deps, moduleName(d))
			}
		}
	}
	sort.Strings(deps)
	return deps, nil
}
