package local_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local"
)

// TestForgetWaitsOnlyForItsTemplate: while one template's ready snapshot
// is being made (its VM's boot hangs here; a tenant's ready command can
// take minutes), forgetting that template waits for it, and a create from
// another template goes on meanwhile: no create waits behind the forget.
func TestForgetWaitsOnlyForItsTemplate(t *testing.T) {
	blocked := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	d := &fakeDriver{start: func(ctx context.Context, spec vmm.BootSpec) error {
		if !strings.HasPrefix(spec.ID, "tpl-") {
			return nil // a sandbox's VM boots at once
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return errors.New("fake driver: no template VM")
		}
		close(blocked)
		select { // the first template VM hangs in its boot
		case <-release:
		case <-ctx.Done():
		}
		return errors.New("fake driver: template VM released")
	}}
	cfg, vol := fakeEnv(t, d)
	ctx := context.Background()
	other, err := template.BuildBase(ctx, template.BaseOptions{TemplatesDir: vol.TemplatesDir, AgentBinary: testenv.AgentBinary(t),
		Defaults: template.Defaults{Workdir: "/tmp"}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := local.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanupAll(t, w) })
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before cleanupAll: a create still in the hung boot holds its sandbox

	specOf := func(id string, m template.Metadata) worker.SandboxSpec {
		s := spec(id)
		s.Template = m.Ref()
		return s
	}
	slowDone := make(chan error, 1)
	go func() {
		_, err := w.CreateSandbox(ctx, specOf("sbx_slow", vol.Base))
		slowDone <- err
	}()
	select {
	case <-blocked:
	case <-time.After(time.Minute):
		t.Fatal("the slow template's VM never started")
	}
	forgot := make(chan error, 1)
	go func() { forgot <- w.ForgetTemplate(ctx, vol.Base.Ref()) }()
	testenv.Eventually(t, time.Minute, func() error {
		if !blockedIn("(*Worker).ForgetTemplate") {
			return errors.New("the forget is not waiting yet")
		}
		return nil
	})

	created := make(chan error, 1)
	go func() {
		_, err := w.CreateSandbox(ctx, specOf("sbx_other", other))
		created <- err
	}()
	select {
	case err := <-created:
		if err != nil {
			t.Fatalf("create from the other template: %v", err)
		}
	case err := <-forgot:
		t.Fatalf("the forget of the slow template returned (%v) while its snapshot was being made", err)
	case <-time.After(time.Minute):
		t.Fatal("a create from another template waited behind the forget of the one whose snapshot is being made")
	}
	free()
	for what, ch := range map[string]chan error{"slow create": slowDone, "forget": forgot} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s did not end after the template VM was released", what)
		}
	}
}
