package kuberig

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// kubeBinary resolves the multi-call Kubernetes binary: the explicit path,
// else $SPACE_KUBE_BIN, else what scripts/kube-build.sh prints (a cold build
// takes minutes; `make test` runs it first so tests find it cached).
func kubeBinary(ctx context.Context, explicit string) (string, error) {
	if explicit == "" {
		explicit = os.Getenv("SPACE_KUBE_BIN")
	}
	if explicit != "" {
		if _, err := os.Stat(explicit); err != nil {
			return "", fmt.Errorf("kuberig: kube binary: %w", err)
		}
		return explicit, nil
	}
	script, err := buildScript()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "bash", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kuberig: scripts/kube-build.sh: %w\n%s", err, stderr.Bytes())
	}
	bin := strings.TrimSpace(string(out))
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("kuberig: scripts/kube-build.sh printed %q: %w", bin, err)
	}
	return bin, nil
}

// buildScript finds scripts/kube-build.sh in the working directory or
// above it: tests run in their package's directory, `make cluster` at the
// repository's root.
func buildScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("kuberig: %w", err)
	}
	for {
		script := filepath.Join(dir, "scripts", "kube-build.sh")
		if _, err := os.Stat(script); err == nil {
			return script, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("kuberig: no kube binary: set SPACE_KUBE_BIN, or run from the repository (scripts/kube-build.sh not found above the working directory)")
		}
		dir = parent
	}
}
