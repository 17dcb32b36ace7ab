package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api"
	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/secrets"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/sqlite"
)

// server starts a full API server over SQLite with the apitest worker and
// returns its URL and an admin key.
func server(t *testing.T) (string, string) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db"))
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
	au := auth.New(st, nil)
	apitest.RegisterBaseTemplate(t, st)
	sealKey, err := secrets.LoadKey(filepath.Join(t.TempDir(), secrets.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.New(st, sealKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := sandbox.New(sandbox.Config{}, sandbox.Deps{Store: st, Ops: eng, Worker: apitest.NewWorker(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Config{}, api.Deps{Service: svc, Store: st, Ops: eng, Auth: au, Secrets: sec})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	tn := &store.Tenant{ID: store.NewID(store.PrefixTenant), Name: "admin", CreatedAt: time.Now()}
	if err := st.CreateTenant(t.Context(), tn); err != nil {
		t.Fatal(err)
	}
	key, _, err := au.CreateKey(t.Context(), tn.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	return hs.URL, key
}

type run struct {
	t    *testing.T
	c    *client.Client
	code int
	out  string
	err  string
}

func (r *run) run(stdin string, args ...string) *run {
	var out, errb bytes.Buffer
	r.code = Run(r.t.Context(), args, Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Client: r.c})
	r.out, r.err = out.String(), errb.String()
	return r
}

func TestCLI(t *testing.T) {
	url, key := server(t)
	c, _ := client.New(url, key, nil)
	r := &run{t: t, c: c}

	if r.run("", "sandbox", "create", "--metadata", "who=cli", "--json"); r.code != 0 {
		t.Fatalf("create: %d %s", r.code, r.err)
	}
	var sb apiv1.Sandbox
	if err := json.Unmarshal([]byte(r.out), &sb); err != nil || sb.State != "running" {
		t.Fatalf("create output %q: %v", r.out, err)
	}
	if r.run("", "sandbox", "list", "--json"); r.code != 0 || !strings.Contains(r.out, sb.ID) {
		t.Errorf("list: %d %s %s", r.code, r.out, r.err)
	}
	if r.run("", "sandbox", "list"); r.code != 0 || !strings.Contains(r.out, "who=cli") {
		t.Errorf("list table: %s", r.out)
	}
	if r.run("", "exec", sb.ID, "--", "sh", "-c", "echo out; echo err >&2; exit 4"); r.code != 4 || r.out != "out\n" || r.err != "err\n" {
		t.Errorf("exec: code %d out %q err %q", r.code, r.out, r.err)
	}
	if r.run("piped\n", "exec", "-i", sb.ID, "--", "cat"); r.code != 0 || r.out != "piped\n" {
		t.Errorf("exec -i: code %d out %q err %q", r.code, r.out, r.err)
	}
	if r.run("", "exec", "--json", sb.ID, "--", "true"); r.code != 0 || !strings.Contains(r.out, `"type":"exit"`) {
		t.Errorf("exec --json: %q", r.out)
	}
	if r.run("", "exec", "-t", sb.ID, "--", "true"); r.code != 2 {
		t.Errorf("exec -t without a terminal: %d", r.code)
	}

	local := filepath.Join(t.TempDir(), "f.txt")
	os.WriteFile(local, []byte("content"), 0o644)
	if r.run("", "files", "put", sb.ID, local, "/data/f.txt", "--mode", "0600"); r.code != 0 {
		t.Fatalf("files put: %s", r.err)
	}
	if r.run("", "files", "get", sb.ID, "/data/f.txt"); r.out != "content" {
		t.Errorf("files get: %q %s", r.out, r.err)
	}
	if r.run("", "files", "ls", sb.ID, "/data"); !strings.Contains(r.out, "0600") || !strings.Contains(r.out, "f.txt") {
		t.Errorf("files ls: %q", r.out)
	}

	if r.run("", "admin", "tenant", "create", "team"); r.code != 0 {
		t.Fatalf("tenant create: %s", r.err)
	}
	if r.run("", "admin", "key", "create", "team", "--json"); r.code != 0 {
		t.Fatalf("key create: %s", r.err)
	}
	var k apiv1.KeyResponse
	json.Unmarshal([]byte(r.out), &k)
	teamClient, _ := client.New(url, k.Key, nil)
	if _, err := teamClient.ListSandboxes(t.Context(), client.SandboxFilter{}); err != nil {
		t.Errorf("new key does not work: %v", err)
	}
	if r.run("", "admin", "key", "delete", k.ID); r.code != 0 {
		t.Fatalf("key delete: %s", r.err)
	}
	if _, err := teamClient.ListSandboxes(t.Context(), client.SandboxFilter{}); err == nil {
		t.Error("revoked key still works")
	}

	if r.run("", "sandbox", "delete", sb.ID, "--json"); r.code != 0 {
		t.Fatalf("delete: %s", r.err)
	}
	var op apiv1.Operation
	json.Unmarshal([]byte(r.out), &op)
	if r.run("", "op", "get", op.ID); r.code != 0 || !strings.Contains(r.out, "succeeded") {
		t.Errorf("op get: %q %s", r.out, r.err)
	}
	if r.run("", "sandbox", "get", "sbx_nope"); r.code != 1 || !strings.Contains(r.err, "not_found") {
		t.Errorf("get missing: %d %q", r.code, r.err)
	}
	if r.run("", "bogus"); r.code != 2 {
		t.Errorf("unknown command: %d", r.code)
	}
}

// TestLifecycleCLI drives pause, wake, suspend, keep, checkpoints and
// restore through the CLI against the API with the fake worker.
func TestLifecycleCLI(t *testing.T) {
	url, key := server(t)
	c, _ := client.New(url, key, nil)
	r := &run{t: t, c: c}
	if r.run("", "sandbox", "create", "--json"); r.code != 0 {
		t.Fatalf("create: %d %s", r.code, r.err)
	}
	var sb apiv1.Sandbox
	if err := json.Unmarshal([]byte(r.out), &sb); err != nil {
		t.Fatal(err)
	}
	state := func(want string) {
		t.Helper()
		got, err := c.GetSandbox(t.Context(), sb.ID)
		if err != nil || got.State != want {
			t.Fatalf("sandbox state = %v (%v), want %s", got, err, want)
		}
	}
	for _, step := range []struct{ verb, want string }{
		{"pause", "paused"}, {"wake", "running"}, {"suspend", "suspended"}, {"wake", "running"},
	} {
		if r.run("", "sandbox", step.verb, sb.ID); r.code != 0 || !strings.Contains(r.out, "succeeded") {
			t.Fatalf("sandbox %s: %d %q %q", step.verb, r.code, r.out, r.err)
		}
		state(step.want)
	}
	if r.run("", "sandbox", "wake", sb.ID); r.code == 0 || !strings.Contains(r.err, "running") {
		t.Errorf("wake of a running sandbox: %d %q", r.code, r.err)
	}
	if r.run("", "sandbox", "keep", sb.ID, "600"); r.code != 0 || !strings.Contains(r.out, "expires") {
		t.Errorf("keep: %d %q %q", r.code, r.out, r.err)
	}
	if r.run("", "checkpoint", "create", sb.ID, "--name", "first"); r.code != 0 || !strings.HasPrefix(r.out, "ckpt_") {
		t.Fatalf("checkpoint create: %d %q %q", r.code, r.out, r.err)
	}
	ckpt := strings.TrimSpace(r.out)
	if r.run("", "checkpoint", "list", sb.ID); r.code != 0 || !strings.Contains(r.out, ckpt) || !strings.Contains(r.out, "first") {
		t.Errorf("checkpoint list: %d %q", r.code, r.out)
	}
	if r.run("", "restore", sb.ID, ckpt); r.code != 0 || !strings.Contains(r.out, "succeeded") {
		t.Errorf("restore: %d %q %q", r.code, r.out, r.err)
	}
	state("running")
	if r.run("", "checkpoint", "delete", ckpt); r.code != 0 {
		t.Errorf("checkpoint delete: %d %q", r.code, r.err)
	}
	if r.run("", "checkpoint", "get", ckpt); r.code == 0 {
		t.Error("checkpoint get after delete exited 0")
	}
}
