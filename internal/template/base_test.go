package template

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
)

// needBuildHost skips unless the host can build images: root, e2fsprogs and
// Debian's busybox-static.
func needBuildHost(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (image files get their owners)")
	}
	for _, tool := range []string{"mkfs.ext4", "debugfs", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (package e2fsprogs; run `make setup`)", tool)
		}
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("needs /bin/busybox (package busybox-static; run `make setup`)")
	}
}

func debugfs(t *testing.T, image, request string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", request, image).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs -R %q: %v\n%s", request, err, out)
	}
	return string(out)
}

func writeAgent(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "space-agent")
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestBuildBase(t *testing.T) {
	needBuildHost(t)
	ctx := context.Background()
	templates := t.TempDir()
	agentBody := "stand-in agent: only its bytes are copied\n"
	opts := BaseOptions{TemplatesDir: templates, AgentBinary: writeAgent(t, agentBody)}

	m, err := BuildBase(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != BaseName || !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(m.Digest) {
		t.Fatalf("metadata = %+v", m)
	}
	if m.Image != filepath.Join(templates, "base", strings.TrimPrefix(m.Digest, "sha256:"), "rootfs.ext4") {
		t.Errorf("image = %s", m.Image)
	}
	fi, err := os.Stat(m.Image)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != m.SizeBytes || m.SizeBytes != 256<<20 {
		t.Errorf("image size %d, metadata %d, want 256 MiB", fi.Size(), m.SizeBytes)
	}
	want := Defaults{Vcpus: 1, MemoryMiB: 256, DiskMiB: 256}
	if m.Defaults.Vcpus != want.Vcpus || m.Defaults.MemoryMiB != want.MemoryMiB || m.Defaults.DiskMiB != want.DiskMiB {
		t.Errorf("defaults = %+v, want %+v", m.Defaults, want)
	}
	if d, err := imageDigest(ctx, m.Image, m.Defaults); err != nil || d != m.Digest {
		t.Errorf("recomputed digest %s (%v), metadata says %s", d, err, m.Digest)
	}

	if out, err := exec.Command("e2fsck", "-fn", m.Image).CombinedOutput(); err != nil {
		t.Fatalf("e2fsck -fn: %v\n%s", err, out)
	}
	bin := debugfs(t, m.Image, "ls -l /bin")
	for _, applet := range []string{"busybox", "sh", "bash", "wget", "nc", "ps", "ls", "cat", "env"} {
		if !regexp.MustCompile(`\s` + applet + `\s*\n`).MatchString(bin) {
			t.Errorf("/bin lacks %s:\n%s", applet, bin)
		}
	}
	if got := debugfs(t, m.Image, "stat /bin/bash"); !regexp.MustCompile(`Type: regular`).MatchString(got) {
		t.Errorf("/bin/bash is not the static bash itself:\n%s", got)
	}
	if len(m.Warnings) == 0 || !strings.Contains(m.Warnings[0], "wget") {
		t.Errorf("base notes %q do not tell of busybox wget -T", m.Warnings)
	}
	if got := debugfs(t, m.Image, "cat "+AgentPath); !strings.Contains(got, agentBody) {
		t.Errorf("%s = %q, want the agent binary", AgentPath, got)
	}
	if got := debugfs(t, m.Image, "cat /etc/passwd"); !strings.Contains(got, "user:x:1000:1000:user:/home/user:/bin/sh") {
		t.Errorf("/etc/passwd lacks user:\n%s", got)
	}
	for _, tc := range []struct{ path, want string }{
		{"/home/user", `User:\s+1000\s+Group:\s+1000`},
		{"/tmp", `Mode:\s+01777`},
		{"/root", `Mode:\s+0700`},
		{"/usr/bin", `Type: symlink`},
	} {
		if got := debugfs(t, m.Image, "stat "+tc.path); !regexp.MustCompile(tc.want).MatchString(got) {
			t.Errorf("stat %s: want %s in\n%s", tc.path, tc.want, got)
		}
	}

	loaded, err := Load(templates, BaseName)
	if err != nil || loaded.Digest != m.Digest || loaded.InputDigest != m.InputDigest {
		t.Fatalf("Load = %+v, %v; want digest %s", loaded, err, m.Digest)
	}

	// Unchanged inputs: the same image, untouched.
	ino := inode(t, m.Image)
	again, err := BuildBase(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != m.Digest || !again.CreatedAt.Equal(m.CreatedAt) || inode(t, again.Image) != ino {
		t.Errorf("rebuild with same inputs made a new image: %+v", again)
	}

	// A new agent is a new image.
	opts.AgentBinary = writeAgent(t, agentBody+"v2\n")
	changed, err := BuildBase(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Digest == m.Digest || changed.InputDigest == m.InputDigest {
		t.Errorf("new agent kept digest %s", changed.Digest)
	}
	if got := debugfs(t, changed.Image, "cat "+AgentPath); !strings.Contains(got, "v2") {
		t.Errorf("rebuilt image has the old agent")
	}
	assertNoScratch(t, templates)
	if cur, err := Load(templates, BaseName); err != nil || cur.Digest != changed.Digest {
		t.Errorf("Load(base) = %s, %v; want the newest build %s", cur.Digest, err, changed.Digest)
	}
	if old, err := Load(templates, m.Ref()); err != nil || old.Image != m.Image {
		t.Errorf("Load(%s) = %+v, %v; the older build should stay addressable", m.Ref(), old, err)
	}
}

func TestBuildBaseErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := BuildBase(ctx, BaseOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("no options: err = %v, want invalid_argument", err)
	}
	_, err := BuildBase(ctx, BaseOptions{TemplatesDir: t.TempDir(), AgentBinary: "/nonexistent/space-agent"})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("missing agent: err = %v, want failed_precondition", err)
	}
	if _, err := Load(t.TempDir(), BaseName); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Load of unbuilt template: err = %v, want not_found", err)
	}
}

func TestImageSize(t *testing.T) {
	for _, tc := range []struct{ content, want, got int64 }{
		{10 * mib, 256 * mib, 256 * mib},                   // fits: the configured size
		{400 * mib, 256 * mib, 400*mib + 100*mib + 32*mib}, // grows to content + headroom
		{1, 1, 33 * mib}, // rounded up to whole MiB
	} {
		if got := imageSize(tc.content, tc.want); got != tc.got {
			t.Errorf("imageSize(%d, %d) = %d, want %d", tc.content, tc.want, got, tc.got)
		}
	}
}

func TestUUIDFrom(t *testing.T) {
	u := uuidFrom("x")
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(u) {
		t.Errorf("uuidFrom = %s, not a v4-shaped UUID", u)
	}
	if uuidFrom("x") != u || uuidFrom("y") == u {
		t.Error("uuidFrom is not a function of its seed")
	}
}

// assertNoScratch fails when a build left scratch files in the templates dir.
func assertNoScratch(t *testing.T, templates string) {
	t.Helper()
	var left []string
	for _, pat := range []string{".build-*", ".deleting-*", "*/.*.tmp"} {
		m, _ := filepath.Glob(filepath.Join(templates, pat))
		left = append(left, m...)
	}
	if len(left) != 0 {
		t.Errorf("build left scratch files: %v", left)
	}
}
