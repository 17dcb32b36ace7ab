package template

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

// needMmdebstrap skips unless the host can build Debian templates.
func needMmdebstrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Skip("needs mmdebstrap (run `make setup`) and access to a Debian mirror")
	}
}

func TestBuildDebian(t *testing.T) {
	needBuildHost(t)
	needMmdebstrap(t)
	ctx := context.Background()
	b, templates := newTestBuilder(t, func(c *BuilderConfig) { c.AllowScripts = true })
	// The essential set plus one small package keeps CI time down; the
	// script proves it runs inside the image.
	req := BuildRequest{Name: "deb", Source: Source{Type: SourceDebian, Suite: "bookworm", Variant: "essential",
		Packages: []string{"hello"}, Script: "hello > /etc/space-greeting\nid -u >> /etc/space-greeting\n"}}
	var logBuf bytes.Buffer
	var prog progressLog
	m, err := b.Build(ctx, req, prog.fn, &logBuf)
	if err != nil {
		t.Fatalf("%v\nbuild log:\n%s", err, logBuf.String())
	}
	for _, p := range []string{"/usr/bin/hello", "/bin/sh", AgentPath, "/proc", "/tmp"} {
		if !exists(t, m.Image, p) {
			t.Errorf("%s missing from the debian image", p)
		}
	}
	if got := debugfsAny(t, m.Image, "cat /etc/space-greeting"); !strings.Contains(got, "Hello, world!") || !strings.Contains(got, "\n0") {
		t.Errorf("setup script output = %q", got)
	}
	if len(m.Warnings) != 0 {
		t.Errorf("warnings: %v", m.Warnings)
	}
	if !prog.has("debootstrap") || !strings.Contains(logBuf.String(), "I: ") || strings.Contains(logBuf.String(), templates) {
		t.Errorf("progress %v; build log mentions host paths or lacks mmdebstrap output:\n%s", prog.steps, logBuf.String())
	}
	again, err := b.Build(ctx, req, nil, nil)
	if err != nil || again.Digest != m.Digest || !again.CreatedAt.Equal(m.CreatedAt) {
		t.Errorf("unchanged recipe rebuilt: %s, %v", again.Digest, err)
	}
	assertNoScratch(t, templates)
}
