package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// tinyRootfs writes a rootfs tar holding /etc/tiny with body and an empty
// /work; the build adds the agent and a busybox /bin/sh.
func tinyRootfs(t *testing.T, dir, name, body string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"etc/", "work/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	tw.WriteHeader(&tar.Header{Name: "etc/tiny", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
	tw.Write([]byte(body))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// buildTemplate builds through the API and returns the ready build and
// the build operation.
func (c *client) buildTemplate(req map[string]any) (apiv1.Template, apiv1.Operation) {
	c.t.Helper()
	var res apiv1.TemplateAndOperation
	c.mustDo("POST", "/v1/templates", req, &res, 202)
	op := c.waitOp(res.Operation.ID)
	if op.State != "succeeded" {
		c.t.Fatalf("build %v: %s %+v", req["name"], op.State, op.Error)
	}
	var tpl apiv1.Template
	c.mustDo("GET", "/v1/templates/"+req["name"].(string), nil, &tpl, 200)
	return tpl, op
}

func (c *client) sh(sbx, script string) string {
	c.t.Helper()
	var res apiv1.ExecResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx+"/exec", map[string]any{"shell": script}, &res, 200)
	if res.ExitCode == nil || *res.ExitCode != 0 {
		c.t.Fatalf("%q: exit %v, stderr %q", script, res.ExitCode, res.Stderr)
	}
	return res.Stdout
}

// TestTemplates builds a tiny template from a rootfs tar through the API,
// starts sandboxes from it (its defaults applied), rebuilds it, and pins
// the first build by digest.
func TestTemplates(t *testing.T) {
	imports := t.TempDir()
	s := startServer(t, "--template-source-root", imports)
	c := s.client(s.AdminKey)

	defaults := map[string]any{"memory_mib": 192, "env": map[string]string{"GREETING": "hello"}, "workdir": "/work"}
	v1, op1 := c.buildTemplate(map[string]any{"name": "tiny", "defaults": defaults,
		"source": map[string]any{"type": "rootfs", "path": tinyRootfs(t, imports, "v1.tar", "one\n")}})
	if v1.State != "ready" || v1.Scope != "global" {
		t.Fatalf("v1 %+v", v1)
	}

	// The build log: lines numbered from 1, the snapshot made, then the end.
	resp := c.request("GET", "/v1/templates/tiny/builds/"+op1.ID+"/log", nil, nil)
	defer resp.Body.Close()
	var lines []string
	var end apiv1.BuildLogEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev apiv1.BuildLogEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == "end" {
			end = ev
			break
		}
		if ev.Data != nil {
			lines = append(lines, *ev.Data)
		}
	}
	log := strings.Join(lines, "")
	if end.State != "succeeded" || !strings.Contains(log, "snapshot: ready") || !strings.Contains(log, "ready: tiny@"+v1.Digest) {
		t.Fatalf("build log (end %+v):\n%s", end, log)
	}

	sb1 := c.createSandbox(map[string]any{"template": "tiny"})
	if sb1.MemoryMiB != 192 || sb1.TemplateDigest != v1.Digest {
		t.Fatalf("sandbox from tiny: %+v", sb1)
	}
	if got := c.sh(sb1.ID, `echo "$(cat /etc/tiny) $GREETING $(pwd)"`); got != "one hello /work\n" {
		t.Fatalf("sandbox of v1 says %q", got)
	}

	v2, _ := c.buildTemplate(map[string]any{"name": "tiny", "defaults": defaults,
		"source": map[string]any{"type": "rootfs", "path": tinyRootfs(t, imports, "v2.tar", "two\n")}})
	if v2.Digest == v1.Digest {
		t.Fatal("rebuild from another source kept the digest")
	}
	sb2 := c.createSandbox(map[string]any{"template": "tiny"})
	pinned := c.createSandbox(map[string]any{"template": "tiny@" + v1.Digest})
	if got := c.sh(sb2.ID, "cat /etc/tiny"); got != "two\n" {
		t.Fatalf("newest tiny has %q", got)
	}
	if got := c.sh(pinned.ID, "cat /etc/tiny"); got != "one\n" || pinned.TemplateDigest != v1.Digest {
		t.Fatalf("tiny@v1 has %q (%s)", got, pinned.TemplateDigest)
	}

	// In use: 409 until its sandboxes are gone.
	var eb apiv1.ErrorBody
	if st := c.do("DELETE", "/v1/templates/tiny", nil, &eb); st != http.StatusConflict {
		t.Fatalf("delete of a used template: %d %+v", st, eb)
	}
	for _, id := range []string{sb1.ID, sb2.ID, pinned.ID} {
		c.deleteSandbox(id)
	}
	c.mustDo("DELETE", "/v1/templates/tiny", nil, nil, 204)
	if st := c.do("GET", "/v1/templates/tiny", nil, &eb); st != http.StatusNotFound {
		t.Fatalf("GET after delete: %d", st)
	}
}
