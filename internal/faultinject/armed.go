//go:build faultinject

package faultinject

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Enabled reports whether this binary was built with fault injection.
const Enabled = true

// FileEnv names the file that arms a point: when it holds a point's name,
// the process SIGKILLs itself on reaching that point, after removing the
// file (so the restarted server runs through). The test writes the file
// just before the request whose work it wants to cut.
const FileEnv = "SPACE_FAULT_FILE"

// Point kills the process if the armed point is name.
func Point(name string) {
	path := os.Getenv(FileEnv)
	if path == "" {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil || strings.TrimSpace(string(b)) != name {
		return
	}
	_ = os.Remove(path)
	fmt.Fprintf(os.Stderr, "faultinject: SIGKILL at %s\n", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
