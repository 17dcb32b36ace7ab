package api

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// TestPythonWalkthrough runs examples/first_sandbox.py (standard library
// only) against a server. The script runs as a command of a test sandbox:
// the in-process agents reap every child of the test binary, so a process
// started with os/exec here could lose its exit status to them.
func TestPythonWalkthrough(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3 on PATH")
	}
	script, err := filepath.Abs("../../examples/first_sandbox.py")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, Config{})
	runner := e.running(e.alice, nil)
	res, err := e.alice.Exec(t.Context(), runner.ID, apiv1.ExecRequest{CreateCommandRequest: apiv1.CreateCommandRequest{
		Argv: []string{py, script},
		Env:  map[string]string{"SPACE_URL": e.http.URL, "SPACE_API_KEY": e.bobKey, "PATH": "/usr/bin:/bin"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	out := res.Stdout + res.Stderr
	if res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("first_sandbox.py: %+v\n%s", res.ExitCode, out)
	}
	for _, want := range []string{"stdout: hello", "exit code 0 reason exited", "deleted"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
