package guest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
)

// needKernel returns the cached kernel or skips naming what is missing.
func needKernel(t *testing.T) Kernel {
	t.Helper()
	k, err := Locate(KernelDirFromEnv())
	if err != nil {
		t.Skipf("needs a cached guest kernel (run `make setup`): %v", err)
	}
	return k
}

func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("needs %s on PATH (run `make setup`)", name)
	}
	return p
}

func TestVersionLess(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"6.1.0-9-cloud-amd64", "6.1.0-57-cloud-amd64", true},
		{"6.1.0-57-cloud-amd64", "6.1.0-9-cloud-amd64", false},
		{"6.1.0-57-cloud-amd64", "6.12.0-1-cloud-amd64", true},
		{"6.1.0-57-cloud-amd64", "6.1.0-57-cloud-amd64", false},
	} {
		if got := versionLess(tc.a, tc.b); got != tc.want {
			t.Errorf("versionLess(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func fakeRelease(t *testing.T, root, version string) string {
	t.Helper()
	d := filepath.Join(root, version)
	if err := os.MkdirAll(filepath.Join(d, "lib", "modules", version, "kernel"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "vmlinuz"), []byte("bzImage"), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestLocate(t *testing.T) {
	root := t.TempDir()
	if _, err := Locate(root); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "make setup") {
		t.Fatalf("empty cache: err = %v, want failed_precondition naming make setup", err)
	}
	if _, err := Locate(filepath.Join(root, "absent")); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("missing cache: err = %v, want failed_precondition", err)
	}
	fakeRelease(t, root, "6.1.0-9-cloud-amd64")
	newest := fakeRelease(t, root, "6.1.0-57-cloud-amd64")
	// Incomplete release (no modules) must be ignored.
	os.MkdirAll(filepath.Join(root, "6.1.0-99-cloud-amd64"), 0o755)
	os.WriteFile(filepath.Join(root, "6.1.0-99-cloud-amd64", "vmlinuz"), nil, 0o644)

	k, err := Locate(root)
	if err != nil {
		t.Fatal(err)
	}
	want := Kernel{
		Version:    "6.1.0-57-cloud-amd64",
		Vmlinuz:    filepath.Join(newest, "vmlinuz"),
		ModulesDir: filepath.Join(newest, "lib", "modules", "6.1.0-57-cloud-amd64"),
	}
	if k != want {
		t.Fatalf("Locate(root) = %+v, want %+v", k, want)
	}
	if k2, err := Locate(newest); err != nil || k2 != want {
		t.Fatalf("Locate(release dir) = %+v, %v; want %+v", k2, err, want)
	}
}

func TestResolveModules(t *testing.T) {
	k := needKernel(t)
	mods, err := ResolveModules(k, DefaultModules)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, m := range mods {
		if _, dup := pos[m.Name]; dup {
			t.Errorf("module %s listed twice", m.Name)
		}
		pos[m.Name] = i
		if _, err := os.Stat(filepath.Join(k.ModulesDir, m.Path)); err != nil {
			t.Errorf("module %s: %v", m.Name, err)
		}
	}
	for _, n := range DefaultModules {
		if _, ok := pos[n]; !ok {
			t.Errorf("module %s missing from %v", n, mods)
		}
	}
	for _, m := range mods {
		for _, d := range m.Depends {
			if pd, ok := pos[d]; !ok || pd > pos[m.Name] {
				t.Errorf("module %s comes before (or without) its dependency %s", m.Name, d)
			}
		}
	}
	// Known facts of Debian's kernel: virtio_net needs net_failover, the rng
	// driver's file name has a dash.
	if !contains(mods[pos["virtio_net"]].Depends, "net_failover") {
		t.Errorf("virtio_net depends = %v, want net_failover among them", mods[pos["virtio_net"]].Depends)
	}
	if p := mods[pos["virtio_rng"]].Path; !strings.HasSuffix(p, "/virtio-rng.ko") {
		t.Errorf("virtio_rng path = %s", p)
	}

	if _, err := ResolveModules(k, []string{"no_such_module"}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("unknown module: err = %v, want failed_precondition", err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// listCpio returns `cpio -itv` lines of a gzip-compressed archive.
func listCpio(t *testing.T, archive string) []string {
	t.Helper()
	needTool(t, "cpio")
	cmd := exec.Command("sh", "-c", `gzip -dc "$1" | cpio -itv --quiet`, "sh", archive)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -t: %v\n%s", err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func extractCpio(t *testing.T, archive string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", `gzip -dc "$1" | cpio -id --quiet --no-absolute-filenames --nonmatching 'dev/*'`, "sh", archive)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v\n%s", err, out)
	}
	return dir
}

func TestBuildInitramfs(t *testing.T) {
	k := needKernel(t)
	ctx := context.Background()
	cache := t.TempDir()
	agent := filepath.Join(t.TempDir(), "space-agent")
	agentBytes := []byte("\x7fELF stand-in agent: only its bytes are packed\n")
	if err := os.WriteFile(agent, agentBytes, 0o755); err != nil {
		t.Fatal(err)
	}

	ir, err := BuildInitramfs(ctx, k, InitramfsOptions{AgentBinary: agent, CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if ir.Cached || !strings.HasPrefix(ir.Digest, "sha256:") {
		t.Fatalf("first build: %+v", ir)
	}

	lines := listCpio(t, ir.Path)
	byName := map[string]string{}
	for _, l := range lines {
		f := strings.Fields(l)
		byName[f[len(f)-1]] = l
	}
	if l := byName["init"]; !strings.HasPrefix(l, "-rwxr-xr-x") {
		t.Errorf("init entry = %q, want an executable file", l)
	}
	if l := byName["dev/console"]; !strings.HasPrefix(l, "crw-------") || !strings.Contains(l, "5,") {
		t.Errorf("dev/console entry = %q, want char device 5,1", l)
	}

	dir := extractCpio(t, ir.Path)
	if got, _ := os.ReadFile(filepath.Join(dir, "init")); !bytes.Equal(got, agentBytes) {
		t.Errorf("/init = %q, want the agent binary", got)
	}
	manifest, err := os.ReadFile(filepath.Join(dir, ModulesManifest))
	if err != nil {
		t.Fatal(err)
	}
	paths := strings.Split(strings.TrimSpace(string(manifest)), "\n")
	if len(paths) != len(ir.Modules) {
		t.Fatalf("manifest has %d lines, want %d:\n%s", len(paths), len(ir.Modules), manifest)
	}
	for i, m := range ir.Modules {
		want := ManifestPath(k, m)
		if paths[i] != want {
			t.Errorf("manifest line %d = %s, want %s", i, paths[i], want)
		}
		got, err := os.ReadFile(filepath.Join(dir, want))
		if err != nil {
			t.Errorf("module %s not in archive: %v", m.Name, err)
			continue
		}
		orig, _ := os.ReadFile(filepath.Join(k.ModulesDir, m.Path))
		if !bytes.Equal(got, orig) {
			t.Errorf("module %s differs from the kernel's file", m.Name)
		}
	}

	again, err := BuildInitramfs(ctx, k, InitramfsOptions{AgentBinary: agent, CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cached || again.Path != ir.Path || again.Digest != ir.Digest {
		t.Errorf("rebuild with same inputs = %+v, want cached %s", again, ir.Path)
	}

	if err := os.WriteFile(agent, append(agentBytes, '!'), 0o755); err != nil {
		t.Fatal(err)
	}
	changed, err := BuildInitramfs(ctx, k, InitramfsOptions{AgentBinary: agent, CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if changed.Cached || changed.Digest == ir.Digest {
		t.Errorf("new agent reused the old archive: %+v", changed)
	}
	if _, err := BuildInitramfs(ctx, k, InitramfsOptions{AgentBinary: filepath.Join(cache, "nope"), CacheDir: cache}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("missing agent: err = %v, want failed_precondition", err)
	}
}
