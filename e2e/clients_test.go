package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// testPythonWalkthrough runs the README's walkthrough as written, with a
// tenant key (not the admin's), and checks it left no sandbox running.
func testPythonWalkthrough(t *testing.T, srv *server) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3 (Debian package python3; make setup installs it)")
	}
	key := newTenantKey(t, srv, "python-walkthrough")
	cmd := exec.Command("python3", filepath.Join("..", "examples", "first_sandbox.py"))
	cmd.Env = append(os.Environ(), "SPACE_URL="+srv.URL, "SPACE_API_KEY="+key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("first_sandbox.py: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "hello") {
		t.Errorf("walkthrough output lacks the command's output:\n%s", out)
	}
	var list apiv1.SandboxList
	srv.client(key).mustDo("GET", "/v1/sandboxes?state=running", nil, &list, 200)
	if len(list.Sandboxes) != 0 {
		t.Errorf("walkthrough left running sandboxes: %+v", list.Sandboxes)
	}
}

// testCLI drives the space CLI against the server: exec streams output and
// exits with the command's code; --json gives machine-readable output.
func testCLI(t *testing.T, srv *server, sbx apiv1.Sandbox) {
	space := func(args ...string) (string, int) {
		cmd := exec.Command(filepath.Join(binDir, "space"), args...)
		cmd.Env = append(os.Environ(), "SPACE_URL="+srv.URL, "SPACE_API_KEY="+srv.AdminKey)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("space %v: %v", args, err)
		}
		return string(out), 0
	}
	out, code := space("exec", sbx.ID, "--", "sh", "-c", "echo from-cli; exit 3")
	if code != 3 || !strings.Contains(out, "from-cli") {
		t.Errorf("space exec: exit %d, output %q", code, out)
	}
	out, code = space("sandbox", "get", sbx.ID, "--json")
	var got apiv1.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.ID != sbx.ID {
		t.Errorf("space sandbox get --json: exit %d, %q", code, out)
	}
	if _, code = space("sandbox", "get", "sbx_nope"); code == 0 {
		t.Error("space sandbox get of an unknown id exited 0")
	}
	src := filepath.Join(t.TempDir(), "up.txt")
	os.WriteFile(src, []byte("cli file\n"), 0o644)
	if out, code = space("files", "put", sbx.ID, src, "/root/cli.txt"); code != 0 {
		t.Errorf("space files put: %d %q", code, out)
	}
	if out, code = space("files", "get", sbx.ID, "/root/cli.txt", "-"); code != 0 || out != "cli file\n" {
		t.Errorf("space files get: %d %q", code, out)
	}
}
