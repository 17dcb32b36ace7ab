package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api"
	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/sqlite"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/testenv"
)

// templateServer is server with a real template builder whose source root
// is the returned dir.
func templateServer(t *testing.T) (url, key, imports string) {
	t.Helper()
	testenv.RequireRoot(t, "template builds: image files keep their owners")
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("template builds need mkfs.ext4 (e2fsprogs)")
	}
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng := operation.New(operation.Config{Store: st})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		eng.Close(ctx)
	})
	imports = filepath.Join(dir, "imports")
	agent := filepath.Join(dir, "agent")
	os.MkdirAll(imports, 0o755)
	os.WriteFile(agent, []byte("stand-in agent\n"), 0o755)
	b, err := template.NewBuilder(template.BuilderConfig{TemplatesDir: filepath.Join(dir, "templates"), AgentBinary: agent,
		HeadroomMiB: 8, SourceRoots: []string{imports}})
	if err != nil {
		t.Fatal(err)
	}
	au := auth.New(st, nil)
	apitest.RegisterBaseTemplate(t, st)
	svc, err := sandbox.New(sandbox.Config{}, sandbox.Deps{Store: st, Ops: eng, Worker: apitest.NewWorker(t),
		Templates: sandbox.TemplateDeps{Builder: b, LogDir: filepath.Join(dir, "logs")}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Config{}, api.Deps{Service: svc, Store: st, Ops: eng, Auth: au})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	tn := &store.Tenant{ID: store.NewID(store.PrefixTenant), Name: "admin", CreatedAt: time.Now()}
	if err := st.CreateTenant(t.Context(), tn); err != nil {
		t.Fatal(err)
	}
	key, _, err = au.CreateKey(t.Context(), tn.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	return hs.URL, key, imports
}

func TestTemplateCLI(t *testing.T) {
	url, key, imports := templateServer(t)
	c, _ := client.New(url, key, nil)
	r := &run{t: t, c: c}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "etc/hi", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
	tw.Write([]byte("hi\n"))
	tw.Close()
	src := filepath.Join(imports, "root.tar")
	os.WriteFile(src, buf.Bytes(), 0o644)

	if r.run("", "template", "build", "tiny", "--from-rootfs", src, "--memory-mib", "192", "--env", "A=1"); r.code != 0 {
		t.Fatalf("build: %d %s", r.code, r.err)
	}
	if !strings.Contains(r.out, "built tiny@sha256:") || !strings.Contains(r.out, "ready: tiny@sha256:") {
		t.Fatalf("build output %q", r.out)
	}
	if !strings.Contains(r.err, "[##############################] 100% done") {
		t.Fatalf("no progress bar in %q", r.err)
	}
	if r.run("", "template", "list"); r.code != 0 || !strings.Contains(r.out, "tiny") || !strings.Contains(r.out, "ready") {
		t.Fatalf("list: %d %q %s", r.code, r.out, r.err)
	}
	if r.run("", "template", "get", "tiny"); r.code != 0 || !strings.Contains(r.out, `"memory_mib": 192`) {
		t.Fatalf("get: %d %q %s", r.code, r.out, r.err)
	}
	if r.run("", "template", "build", "bad", "--from-rootfs", filepath.Join(imports, "missing.tar")); r.code != 1 ||
		!strings.Contains(r.err, "build of bad failed: invalid_argument") {
		t.Fatalf("failed build: %d %q", r.code, r.err)
	}
	if r.run("", "template", "build", "x"); r.code != 2 {
		t.Fatalf("build without a source: %d %s", r.code, r.err)
	}
	if r.run("", "template", "delete", "tiny"); r.code != 0 {
		t.Fatalf("delete: %d %s", r.code, r.err)
	}
	if r.run("", "template", "get", "tiny"); r.code != 1 || !strings.Contains(r.err, "not found") {
		t.Fatalf("get after delete: %d %s", r.code, r.err)
	}
}
