package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// TestPythonSDK runs the Python SDK's unittest suite (sdk/python/tests)
// against a real spaced with a tenant key, installs the SDK with pip and
// runs the README's "Use it from Python" example as written, then checks
// that nothing was left running.
func TestPythonSDK(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("needs python3 (Debian package python3; make setup installs it)")
	}
	srv := startServer(t)
	key := newTenantKey(t, srv, "python-sdk")
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	sdk := filepath.Join(root, "sdk", "python")
	env := append(os.Environ(), "SPACE_URL="+srv.URL, "SPACE_API_KEY="+key, "PYTHONDONTWRITEBYTECODE=1")

	t.Run("unittest", func(t *testing.T) {
		// The template build test writes its rootfs tar where the server
		// reads template sources by default.
		out, err := runPython(t, 20*time.Minute, sdk, append(env, "PYTHONPATH="+sdk,
			"SPACE_TEMPLATE_IMPORTS="+filepath.Join(srv.dataDir, "imports")),
			"python3", "-m", "unittest", "discover", "-s", "tests", "-v")
		t.Logf("python3 -m unittest discover -s sdk/python/tests:\n%s", out)
		if err != nil {
			t.Fatalf("the SDK's tests failed: %v", err)
		}
		if !strings.Contains(out, "\nOK") {
			t.Fatalf("unittest did not report OK")
		}
	})

	t.Run("pip install and README example", func(t *testing.T) {
		// Debian's pip, setuptools and wheel (python3-pip; make setup
		// installs it) build the package offline.
		py := "/usr/bin/python3"
		if out, err := exec.Command(py, "-m", "pip", "--version").CombinedOutput(); err != nil {
			t.Fatalf("needs pip for %s (Debian package python3-pip; make setup installs it): %v %s", py, err, out)
		}
		// From a copy: setuptools writes build/ and *.egg-info beside the sources.
		src := filepath.Join(t.TempDir(), "python")
		if err := os.CopyFS(src, os.DirFS(sdk)); err != nil {
			t.Fatal(err)
		}
		site := t.TempDir()
		out, err := runPython(t, 5*time.Minute, root, env, py, "-m", "pip", "install", "--quiet", "--no-build-isolation",
			"--no-deps", "--no-index", "--target", site, src)
		if err != nil {
			t.Fatalf("pip install ./sdk/python: %v\n%s", err, out)
		}
		if _, err := os.Stat(filepath.Join(site, "space", "py.typed")); err != nil {
			t.Errorf("the installed package lacks py.typed: %v", err)
		}
		example := readmeBlock(t, filepath.Join(root, "README.md"), "## Use it from Python", "```python")
		script := filepath.Join(t.TempDir(), "example.py")
		if err := os.WriteFile(script, []byte(example), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err = runPython(t, 10*time.Minute, t.TempDir(), append(env, "PYTHONPATH="+site), py, script)
		t.Logf("README example:\n%s", out)
		if err != nil {
			t.Fatalf("the README's Python example failed: %v", err)
		}
		for _, want := range []string{"3 hello from Linux", "kept across checkpoints", "not found:"} {
			if !strings.Contains(out, want) {
				t.Errorf("example output lacks %q", want)
			}
		}
	})

	var list apiv1.SandboxList
	srv.client(key).mustDo("GET", "/v1/sandboxes?state=creating,running,paused,suspended&page_size=1000", nil, &list, 200)
	if len(list.Sandboxes) != 0 {
		t.Errorf("the Python SDK tests left sandboxes: %+v", list.Sandboxes)
	}
}

// TestPythonSDKTypes checks the SDK's annotations (it ships py.typed) with
// mypy --strict for the oldest Python it supports.
func TestPythonSDKTypes(t *testing.T) {
	if _, err := exec.LookPath("mypy"); err != nil {
		t.Fatal("needs mypy (Debian package mypy; make setup installs it)")
	}
	out, err := runPython(t, 5*time.Minute, filepath.Join("..", "sdk", "python"), os.Environ(),
		"mypy", "--strict", "--python-version", "3.9", "--cache-dir", os.DevNull, "space")
	t.Logf("mypy --strict --python-version 3.9 space:\n%s", out)
	if err != nil {
		t.Fatalf("mypy: %v", err)
	}
}

// runPython runs a command in dir with a deadline (killed when it passes)
// and returns its combined output.
func runPython(t *testing.T, limit time.Duration, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), ctx.Err()
	}
	return string(out), err
}

// readmeBlock returns the first fenced block opened by fence after the
// heading in the README.
func readmeBlock(t *testing.T, path, heading, fence string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README has no %q section", heading)
	}
	s = s[i:]
	j := strings.Index(s, "\n"+fence+"\n")
	if j < 0 {
		t.Fatalf("README section %q has no %s block", heading, fence)
	}
	s = s[j+len(fence)+2:]
	k := strings.Index(s, "\n```\n")
	if k < 0 {
		t.Fatalf("README section %q: unterminated %s block", heading, fence)
	}
	return s[:k+1]
}
