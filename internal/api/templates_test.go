package api

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker"
)

// snapWorker is the fake worker plus PrepareTemplate, so builds make (and
// can fail to make) their ready snapshot.
type snapWorker struct {
	*apitest.Worker
	mu       sync.Mutex
	prepared []worker.SandboxSpec
	fail     error
}

func (w *snapWorker) PrepareTemplate(ctx context.Context, spec worker.SandboxSpec) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.prepared = append(w.prepared, spec)
	return w.fail
}

func (w *snapWorker) lastPrepared() worker.SandboxSpec {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.prepared) == 0 {
		return worker.SandboxSpec{}
	}
	return w.prepared[len(w.prepared)-1]
}

// The interface the build uses; the other Lifecycle methods are never
// called by it.
type lifecycleStub interface {
	PrepareTemplate(ctx context.Context, spec worker.SandboxSpec) error
}

var _ lifecycleStub = (*snapWorker)(nil)

// tplEnv is an API env with a real template builder (ext4 images are
// made with mkfs.ext4; no VM boots).
type tplEnv struct {
	*env
	snap      *snapWorker
	templates string // templates dir
	imports   string // the source root
	logs      string // build logs dir

	mu         sync.Mutex
	published  []string // builds Publish got, as name@digest
	publishErr error    // what Publish answers, when set
}

func newTplEnv(t *testing.T) *tplEnv {
	t.Helper()
	testenv.RequireRoot(t, "template builds: image files keep their owners")
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("template builds need mkfs.ext4 (e2fsprogs)")
	}
	root := t.TempDir()
	te := &tplEnv{templates: filepath.Join(root, "templates"), imports: filepath.Join(root, "imports")}
	if err := os.MkdirAll(te.imports, 0o755); err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(root, "space-agent")
	if err := os.WriteFile(agent, []byte("stand-in agent\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bc := template.BuilderConfig{TemplatesDir: te.templates, AgentBinary: agent, HeadroomMiB: 8, SourceRoots: []string{te.imports}}
	b, err := template.NewBuilder(bc)
	if err != nil {
		t.Fatal(err)
	}
	te.logs = filepath.Join(root, "logs")
	te.env = newEnvWith(t, Config{}, func(d *sandbox.Deps) {
		d.Templates = sandbox.TemplateDeps{Builder: b, LogDir: te.logs, TemplatesDir: te.templates,
			Publish: func(ctx context.Context, dir string, m template.Metadata) error {
				te.mu.Lock()
				defer te.mu.Unlock()
				if te.publishErr != nil {
					return te.publishErr
				}
				if _, err := os.Stat(filepath.Join(dir, template.MetadataFile)); err != nil {
					return fmt.Errorf("published build has no files: %w", err)
				}
				te.published = append(te.published, m.Ref())
				return nil
			}}
		te.snap = &snapWorker{Worker: d.Worker.(*apitest.Worker)}
		d.Worker = te.snap
	})
	return te
}

// rootfsTar writes a small root filesystem tar into the imports dir.
func (te *tplEnv) rootfsTar(name string, files map[string]string) string {
	te.t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"etc/", "work/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	for p, body := range files {
		tw.WriteHeader(&tar.Header{Name: p, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
		io.WriteString(tw, body)
	}
	if err := tw.Close(); err != nil {
		te.t.Fatal(err)
	}
	path := filepath.Join(te.imports, name)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		te.t.Fatal(err)
	}
	return path
}

// build starts a build and waits for its operation.
func (te *tplEnv) build(c *client.Client, req apiv1.CreateTemplateRequest) (apiv1.TemplateAndOperation, apiv1.Operation) {
	te.t.Helper()
	ctx := context.Background()
	res, err := c.BuildTemplate(ctx, req)
	if err != nil {
		te.t.Fatalf("build %s: %v", req.Name, err)
	}
	op, err := c.WaitOperation(ctx, res.Operation.ID)
	if err != nil {
		te.t.Fatal(err)
	}
	return *res, *op
}

func (te *tplEnv) ready(c *client.Client, req apiv1.CreateTemplateRequest) apiv1.Template {
	te.t.Helper()
	_, op := te.build(c, req)
	if op.State != apiv1.OpSucceeded {
		te.t.Fatalf("build %s: %s %+v", req.Name, op.State, op.Error)
	}
	var res buildResult
	if err := json.Unmarshal(op.Result, &res); err != nil {
		te.t.Fatal(err)
	}
	if res.Template.State != apiv1.TemplateReady || !strings.HasPrefix(res.Template.Digest, "sha256:") {
		te.t.Fatalf("built template %+v", res.Template)
	}
	return res.Template
}

// readLog reads a build log to its end event.
func readLog(t *testing.T, c *client.Client, name, op string, after uint64) ([]string, apiv1.BuildLogEvent) {
	t.Helper()
	st, err := c.BuildLog(context.Background(), name, op, after)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var lines []string
	for {
		ev, err := st.Next()
		if err != nil {
			t.Fatalf("build log ended without an end event: %v (lines %q)", err, lines)
		}
		if ev.Type == apiv1.BuildLogEnd {
			return lines, ev
		}
		if ev.Seq != after+uint64(len(lines))+1 || ev.Data == nil {
			t.Fatalf("log event %+v after %d lines", ev, len(lines))
		}
		lines = append(lines, *ev.Data)
	}
}

func TestTemplateBuildUseAndLog(t *testing.T) {
	te := newTplEnv(t)
	ctx := context.Background()
	src := te.rootfsTar("tiny.tar", map[string]string{"etc/hello": "v1\n"})
	req := apiv1.CreateTemplateRequest{Name: "tiny", Source: apiv1.TemplateSource{Type: "rootfs", Path: src},
		Defaults: &apiv1.TemplateDefaults{VCPUs: 2, MemoryMiB: 384, Env: map[string]string{"A": "tpl", "B": "tpl"},
			Workdir: "/work", User: "nobody"}}
	res, op := te.build(te.alice, req)
	if res.Template.State != apiv1.TemplateBuilding || res.Operation.Type != "template_build" || res.Operation.Target != res.Template.ID {
		t.Fatalf("202 answer %+v", res)
	}
	if op.State != apiv1.OpSucceeded {
		t.Fatalf("build: %s %+v", op.State, op.Error)
	}
	got, err := te.alice.GetTemplate(ctx, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != apiv1.TemplateReady || got.Scope != "tenant" || got.ID != res.Template.ID {
		t.Fatalf("GET tiny = %+v", got)
	}
	snap := te.snap.lastPrepared()
	if snap.Template != "tiny@"+got.Digest || snap.VCPUs != 2 || snap.MemoryMiB != 384 {
		t.Fatalf("ready snapshot made for %+v", snap)
	}
	te.mu.Lock()
	published := slices.Clone(te.published)
	te.mu.Unlock()
	if !slices.Equal(published, []string{"tiny@" + got.Digest}) {
		t.Fatalf("published %v, want the one build", published)
	}

	// The log: every line once, then the end; reattached after line 2.
	lines, end := readLog(t, te.alice, "tiny", op.ID, 0)
	if end.State != apiv1.OpSucceeded || len(lines) < 3 || !strings.Contains(strings.Join(lines, ""), "snapshot: ready") {
		t.Fatalf("log %q end %+v", lines, end)
	}
	rest, _ := readLog(t, te.alice, "tiny", op.ID, 2)
	if strings.Join(rest, "") != strings.Join(lines[2:], "") {
		t.Fatalf("reattached log %q, want %q", rest, lines[2:])
	}
	status, hdr, body := te.do("GET", "/v1/templates/tiny/builds/"+op.ID+"/log", te.aliceKey, nil, "Accept", "text/event-stream")
	if status != 200 || hdr.Get("Content-Type") != "text/event-stream" || !strings.Contains(string(body), "id: 1\ndata: ") {
		t.Fatalf("SSE log: %d %s %q", status, hdr.Get("Content-Type"), body)
	}

	// Another tenant sees nothing of it.
	if _, err := te.bob.GetTemplate(ctx, "tiny"); !isCode(err, "not_found") {
		t.Fatalf("bob GET tiny: %v", err)
	}
	if _, err := te.bob.BuildLog(ctx, "tiny", op.ID, 0); !isCode(err, "not_found") {
		t.Fatalf("bob build log: %v", err)
	}
	if _, err := te.bob.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "tiny"}); !isCode(err, "not_found") {
		t.Fatalf("bob sandbox from tiny: %v", err)
	}
	if _, err := te.bob.BuildTemplate(ctx, req); !isCode(err, "conflict") {
		t.Fatalf("bob builds the name tiny: %v", err)
	}
	list, err := te.bob.Templates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range list.Templates {
		if tp.Name == "tiny" {
			t.Fatalf("bob lists %+v", tp)
		}
	}

	// A sandbox takes the template's defaults; its own env wins.
	sbres, err := te.alice.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "tiny", Env: map[string]string{"B": "req"}})
	if err != nil {
		t.Fatal(err)
	}
	if sbres.Sandbox.VCPUs != 2 || sbres.Sandbox.MemoryMiB != 384 || sbres.Sandbox.TemplateDigest != got.Digest {
		t.Fatalf("sandbox %+v", sbres.Sandbox)
	}
	if op, _ := te.alice.WaitOperation(ctx, sbres.Operation.ID); op.State != apiv1.OpSucceeded {
		t.Fatalf("create: %+v", op.Error)
	}
	vm := te.worker.VM(sbres.Sandbox.ID)
	if vm.Spec.Template != "tiny@"+got.Digest || vm.Spec.Env["A"] != "tpl" || vm.Spec.Env["B"] != "req" {
		t.Fatalf("worker spec %+v", vm.Spec)
	}
	cmd, err := te.alice.CreateCommand(ctx, sbres.Sandbox.ID, apiv1.CreateCommandRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Cwd != "/work" || cmd.User != "nobody" {
		t.Fatalf("command defaults: cwd %q user %q", cmd.Cwd, cmd.User)
	}
}

func isCode(err error, code string) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.Code == code
}

func TestTemplateRebuildPinCacheDelete(t *testing.T) {
	te := newTplEnv(t)
	ctx := context.Background()
	req := func(path string) apiv1.CreateTemplateRequest {
		return apiv1.CreateTemplateRequest{Name: "pinned", Source: apiv1.TemplateSource{Type: "rootfs", Path: path}}
	}
	v1 := te.ready(te.alice, req(te.rootfsTar("v1.tar", map[string]string{"etc/v": "1\n"})))
	v2src := te.rootfsTar("v2.tar", map[string]string{"etc/v": "2\n"})
	v2 := te.ready(te.alice, req(v2src))
	if v1.Digest == v2.Digest {
		t.Fatal("a different source gave the same digest")
	}
	// An unchanged rebuild reuses v2: same digest, one row, newest.
	again := te.ready(te.alice, req(v2src))
	if again.Digest != v2.Digest {
		t.Fatalf("cached rebuild digest %s, want %s", again.Digest, v2.Digest)
	}
	list, _ := te.alice.Templates(ctx)
	n := 0
	for _, tp := range list.Templates {
		if tp.Name == "pinned" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d builds of pinned listed, want 2: %+v", n, list.Templates)
	}
	newest := te.running(te.alice, nil) // base still works
	_ = newest
	for ref, want := range map[string]string{"pinned": v2.Digest, "pinned@" + v1.Digest: v1.Digest} {
		res, err := te.alice.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: ref})
		if err != nil {
			t.Fatal(err)
		}
		if res.Sandbox.TemplateDigest != want {
			t.Fatalf("%s: digest %s, want %s", ref, res.Sandbox.TemplateDigest, want)
		}
		te.alice.WaitOperation(ctx, res.Operation.ID)
	}

	// In use: 409 with counts; force deletes (alice's own sandboxes only).
	err := te.alice.DeleteTemplate(ctx, "pinned@"+v1.Digest, false)
	if !isCode(err, "conflict") {
		t.Fatalf("delete in use: %v", err)
	}
	status, _, body := te.do("DELETE", "/v1/templates/pinned", te.aliceKey, nil)
	if e := wantError(t, status, body, 409, "conflict"); e.Details["sandboxes"] != float64(2) {
		t.Fatalf("details %+v", e.Details)
	}
	if err := te.bob.DeleteTemplate(ctx, "pinned", true); !isCode(err, "not_found") {
		t.Fatalf("bob deletes alice's template: %v", err)
	}
	if err := te.alice.DeleteTemplate(ctx, "base", true); !isCode(err, "permission_denied") {
		t.Fatalf("alice deletes base: %v", err)
	}
	if err := te.alice.DeleteTemplate(ctx, "pinned@"+v1.Digest, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(template.BuildDir(te.templates, "pinned", v1.Digest)); !os.IsNotExist(err) {
		t.Fatalf("deleted build's files: %v", err)
	}
	if got, err := te.alice.GetTemplate(ctx, "pinned"); err != nil || got.Digest != v2.Digest {
		t.Fatalf("after deleting v1: %+v %v", got, err)
	}
	if err := te.alice.DeleteTemplate(ctx, "pinned", true); err != nil {
		t.Fatal(err)
	}
	if _, err := te.alice.GetTemplate(ctx, "pinned"); !isCode(err, "not_found") {
		t.Fatalf("GET after delete: %v", err)
	}
	// The worker dropped its ready snapshots of exactly what was deleted;
	// refused deletes told it nothing.
	want := []string{"pinned@" + v1.Digest, "pinned"}
	if got := te.snap.ForgottenTemplates(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("worker forgot %q, want %q", got, want)
	}
}

func TestTemplateGlobalBuilds(t *testing.T) {
	te := newTplEnv(t)
	ctx := context.Background()
	shared := te.ready(te.admin, apiv1.CreateTemplateRequest{Name: "shared",
		Source: apiv1.TemplateSource{Type: "rootfs", Path: te.rootfsTar("s.tar", map[string]string{"etc/s": "s\n"})}})
	if shared.Scope != "global" {
		t.Fatalf("admin build scope %q", shared.Scope)
	}
	res, err := te.bob.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	te.bob.WaitOperation(ctx, res.Operation.ID)
	if err := te.alice.DeleteTemplate(ctx, "shared", true); !isCode(err, "permission_denied") {
		t.Fatalf("alice deletes a global template: %v", err)
	}
	if _, err := te.alice.BuildTemplate(ctx, apiv1.CreateTemplateRequest{Name: "shared",
		Source: apiv1.TemplateSource{Type: "rootfs", Path: "/x"}}); !isCode(err, "conflict") {
		t.Fatalf("alice builds over a global name: %v", err)
	}
	if err := te.admin.DeleteTemplate(ctx, "shared", false); !isCode(err, "conflict") {
		t.Fatalf("admin deletes a used template without force: %v", err)
	}
	if err := te.admin.DeleteTemplate(ctx, "shared", true); err != nil {
		t.Fatal(err)
	}
}

func TestTemplateBuildValidation(t *testing.T) {
	te := newTplEnv(t)
	good := apiv1.TemplateSource{Type: "rootfs", Path: "/srv/x.tar"}
	for _, tc := range []struct {
		name string
		key  string
		req  apiv1.CreateTemplateRequest
		code string
	}{
		{"bad name", te.aliceKey, apiv1.CreateTemplateRequest{Name: "Bad_Name", Source: good}, "invalid_argument"},
		{"reserved", te.aliceKey, apiv1.CreateTemplateRequest{Name: "base", Source: good}, "invalid_argument"},
		{"no type", te.aliceKey, apiv1.CreateTemplateRequest{Name: "x", Source: apiv1.TemplateSource{Path: "/a"}}, "invalid_argument"},
		{"relative path", te.aliceKey, apiv1.CreateTemplateRequest{Name: "x", Source: apiv1.TemplateSource{Type: "rootfs", Path: "a.tar"}}, "invalid_argument"},
		{"oci path and image", te.aliceKey, apiv1.CreateTemplateRequest{Name: "x", Source: apiv1.TemplateSource{Type: "oci", Path: "/a", Image: "debian"}}, "invalid_argument"},
		{"debian without suite", te.aliceKey, apiv1.CreateTemplateRequest{Name: "x", Source: apiv1.TemplateSource{Type: "debian"}}, "invalid_argument"},
		{"bad defaults", te.aliceKey, apiv1.CreateTemplateRequest{Name: "x", Source: good, Defaults: &apiv1.TemplateDefaults{MemoryMiB: 1}}, "invalid_argument"},
		{"tenant script", te.aliceKey, apiv1.CreateTemplateRequest{Name: "x", Source: apiv1.TemplateSource{Type: "debian", Suite: "bookworm", Script: "id"}}, "permission_denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := json.Marshal(tc.req)
			status, _, body := te.do("POST", "/v1/templates", tc.key, b)
			want := map[string]int{"invalid_argument": 400, "permission_denied": 403}[tc.code]
			wantError(t, status, body, want, tc.code)
		})
	}

	// Bad sources fail the operation with a clear message and leave
	// nothing: no building row, no files.
	notImage := filepath.Join(te.imports, "junk.tar")
	os.WriteFile(notImage, []byte("this is not a tar archive"), 0o644)
	outside := filepath.Join(t.TempDir(), "outside.tar")
	os.WriteFile(outside, []byte("x"), 0o644)
	for _, tc := range []struct {
		name, path, code string
	}{
		{"missing", filepath.Join(te.imports, "nope.tar"), "invalid_argument"},
		{"not an image", notImage, "invalid_argument"},
		{"outside the source roots", outside, "permission_denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, op := te.build(te.alice, apiv1.CreateTemplateRequest{Name: "bad", Source: apiv1.TemplateSource{Type: "rootfs", Path: tc.path}})
			if op.State != apiv1.OpFailed || op.Error == nil || op.Error.Code != tc.code || op.Error.Message == "" {
				t.Fatalf("operation %s %+v, want failed %s", op.State, op.Error, tc.code)
			}
			if strings.Contains(op.Error.Message, te.templates) {
				t.Fatalf("message names a host path: %q", op.Error.Message)
			}
			row, err := te.store.GetTemplate(context.Background(), res.Template.ID)
			if err != nil || row.State != "failed" {
				t.Fatalf("row %+v %v", row, err)
			}
			if _, err := os.Stat(template.Dir(te.templates, "bad")); !os.IsNotExist(err) {
				t.Fatalf("a failed build left files: %v", err)
			}
			_, end := readLog(t, te.alice, "bad", op.ID, 0)
			if end.State != apiv1.OpFailed || end.Error == nil || end.Error.Code != tc.code {
				t.Fatalf("log end %+v", end)
			}
		})
	}

	// A build whose image does not boot fails, and its files go.
	te.snap.fail = errors.New("agent never came up")
	_, op := te.build(te.alice, apiv1.CreateTemplateRequest{Name: "noboot",
		Source: apiv1.TemplateSource{Type: "rootfs", Path: te.rootfsTar("nb.tar", map[string]string{"etc/nb": "1\n"})}})
	if op.State != apiv1.OpFailed || op.Error.Code != "failed_precondition" {
		t.Fatalf("unbootable build: %s %+v", op.State, op.Error)
	}
	if ents, _ := os.ReadDir(template.Dir(te.templates, "noboot")); len(ents) > 0 {
		t.Fatalf("an unbootable build left %d entries", len(ents))
	}
	if status, _, _ := te.do("GET", "/v1/templates/noboot", te.aliceKey, nil); status != http.StatusOK {
		t.Fatalf("GET of a failed-only template: %d", status)
	}
}

// A build's log goes with its build; logs of builds never deleted go after
// sandbox.BuildLogMaxAge, at start.
func TestTemplateBuildLogPruned(t *testing.T) {
	te := newTplEnv(t)
	ctx := context.Background()
	res, op := te.build(te.alice, apiv1.CreateTemplateRequest{Name: "logged",
		Source: apiv1.TemplateSource{Type: "rootfs", Path: te.rootfsTar("l.tar", map[string]string{"etc/l": "1\n"})}})
	if op.State != apiv1.OpSucceeded {
		t.Fatalf("build: %s %+v", op.State, op.Error)
	}
	logs := te.logs
	logOf := filepath.Join(logs, res.Operation.ID+".log")
	if _, err := os.Stat(logOf); err != nil {
		t.Fatalf("build log: %v", err)
	}
	if err := te.alice.DeleteTemplate(ctx, "logged", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(logOf); !os.IsNotExist(err) {
		t.Fatalf("log of a deleted build: %v", err)
	}

	old, fresh := filepath.Join(logs, "op_old.log"), filepath.Join(logs, "op_fresh.log")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-sandbox.BuildLogMaxAge - time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	if err := te.srv.ReconcileTemplates(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("log older than %s kept: %v", sandbox.BuildLogMaxAge, err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("recent log removed: %v", err)
	}
}

// A build its publisher refuses fails, keeps no ready snapshot and is not
// used.
func TestTemplatePublishFails(t *testing.T) {
	te := newTplEnv(t)
	te.mu.Lock()
	te.publishErr = errdefs.New(errdefs.ErrUnavailable, "the object store does not answer")
	te.mu.Unlock()
	src := te.rootfsTar("tiny.tar", map[string]string{"etc/hello": "v1\n"})
	_, op := te.build(te.alice, apiv1.CreateTemplateRequest{Name: "tiny", Source: apiv1.TemplateSource{Type: "rootfs", Path: src}})
	if op.State != apiv1.OpFailed || op.Error == nil || op.Error.Code != "unavailable" {
		t.Fatalf("build with a failing publisher = %s %+v", op.State, op.Error)
	}
	if snap := te.snap.lastPrepared(); snap.Template != "" {
		t.Fatalf("ready snapshot made for %+v", snap)
	}
	if _, err := te.alice.CreateSandbox(context.Background(), apiv1.CreateSandboxRequest{Template: "tiny"}); err == nil {
		t.Fatal("a sandbox was created from the unpublished build")
	}
}
