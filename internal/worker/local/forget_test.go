package local_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local"
)

// snapshotRefs maps each template snapshot dir to the build its manifest
// names.
func snapshotRefs(t *testing.T, root string) map[string]string {
	t.Helper()
	dir := filepath.Join(root, "snapshots", "templates")
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		var m struct {
			Template string `json:"template"`
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name(), "manifest.json"))
		_ = json.Unmarshal(b, &m)
		out[e.Name()] = m.Template
	}
	return out
}

func TestForgetTemplate(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	root := e.cfg.Storage.Root()
	poolRoot := filepath.Join(root, "pool")
	t.Cleanup(func() { testenv.CheckNoLeaks(t, poolRoot) })

	// Two builds of base (their defaults differ, so do their digests).
	a, err := template.Load(e.cfg.TemplatesDir, "base")
	if err != nil {
		t.Fatal(err)
	}
	agentBin := testenv.Boot(t).Agent
	b, err := template.BuildBase(ctx, template.BaseOptions{TemplatesDir: e.cfg.TemplatesDir, AgentBinary: agentBin,
		Defaults: template.Defaults{Workdir: "/tmp"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest == b.Digest {
		t.Fatal("two base builds share a digest")
	}

	e.cfg.PoolSize = 1
	w := e.open()
	t.Cleanup(func() { cleanupAll(t, w) })
	specOf := func(id string, m template.Metadata) (s worker.SandboxSpec) {
		s = spec(id)
		s.Template = m.Ref()
		return s
	}
	for _, m := range []template.Metadata{a, b} {
		if err := w.PrepareTemplate(ctx, specOf("sbx_tpl", m)); err != nil {
			t.Fatal(err)
		}
	}
	awaitPool(t, w, "an entry of each", func(s local.PoolStats) bool { return s.Ready == 2 })
	refs := snapshotRefs(t, root)
	if len(refs) != 2 {
		t.Fatalf("template snapshots %v, want one of each build", refs)
	}

	// Delete build a: its snapshot and pooled VM go, b's stay.
	bld, err := template.NewBuilder(template.BuilderConfig{TemplatesDir: e.cfg.TemplatesDir, AgentBinary: agentBin})
	if err != nil {
		t.Fatal(err)
	}
	if err := bld.Delete(ctx, a.Ref()); err != nil {
		t.Fatal(err)
	}
	if err := w.ForgetTemplate(ctx, a.Ref()); err != nil {
		t.Fatal(err)
	}
	if err := w.ForgetTemplate(ctx, a.Ref()); err != nil { // idempotent
		t.Fatal(err)
	}
	refs = snapshotRefs(t, root)
	if len(refs) != 1 || !containsValue(refs, b.Ref()) {
		t.Fatalf("after forgetting %s: snapshots %v, want only %s's", a.Ref(), refs, b.Ref())
	}
	if st := w.PoolStats(); st.Ready != 1 {
		t.Fatalf("pool after forget: %+v, want only b's entry", st)
	}

	// A create from the other build is unaffected: it takes its pooled VM.
	st, err := w.CreateSandbox(ctx, specOf("sbx_other", b))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Restored || w.PoolStats().Taken != 1 {
		t.Fatalf("create from %s: restored %v, pool %+v", b.Ref(), st.Restored, w.PoolStats())
	}
	if code := sh(t, agent(t, w, "sbx_other"), "true"); code != 0 {
		t.Fatalf("sandbox of the other build: exit %d", code)
	}

	// At start, snapshots of builds gone from disk (or of no known build)
	// are removed; b's stays.
	snaps := filepath.Join(root, "snapshots", "templates")
	stale := map[string]string{
		"0123456789abcdef0123456789abcdef": "base@sha256:" + strings.Repeat("0", 64),
		"fedcba9876543210fedcba9876543210": "",
	}
	for name, ref := range stale {
		if err := os.MkdirAll(filepath.Join(snaps, name), 0o700); err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(map[string]any{"version": 1, "template": ref})
		if err := os.WriteFile(filepath.Join(snaps, name, "manifest.json"), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w.Crash()
	w2 := e.open()
	t.Cleanup(func() { cleanupAll(t, w2) })
	refs = snapshotRefs(t, root)
	if len(refs) != 1 || !containsValue(refs, b.Ref()) {
		t.Fatalf("after restart: snapshots %v, want only %s's", refs, b.Ref())
	}
}

func containsValue(m map[string]string, v string) bool {
	for _, x := range m {
		if x == v {
			return true
		}
	}
	return false
}
