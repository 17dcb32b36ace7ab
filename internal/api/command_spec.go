package api

import (
	"fmt"
	"path"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

const maxCommandTimeout = 7 * 24 * 3600

// validateCommand checks a command or exec request at the edge, so that
// nothing the guest agent would refuse with an error of its own (or could
// not pass to execve at all) gets that far.
func validateCommand(req *apiv1.CreateCommandRequest) error {
	f := map[string]string{}
	switch {
	case len(req.Argv) == 0 && req.Shell == "":
		f["argv"] = "one of argv and shell is required"
	case len(req.Argv) > 0 && req.Shell != "":
		f["shell"] = "give argv or shell, not both"
	case len(req.Argv) > 0 && req.Argv[0] == "":
		f["argv"] = "argv[0] must not be empty"
	}
	noNULs(f, "argv", req.Argv)
	noNUL(f, "shell", req.Shell)
	if noNUL(f, "cwd", req.Cwd) && req.Cwd != "" && !path.IsAbs(req.Cwd) {
		f["cwd"] = "must be an absolute path"
	}
	noNUL(f, "user", req.User)
	validateEnv(req.Env, f)
	if req.PTY != nil && (req.PTY.Rows < 1 || req.PTY.Rows > 1000 || req.PTY.Cols < 1 || req.PTY.Cols > 1000) {
		f["pty"] = "rows and cols must be between 1 and 1000"
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > maxCommandTimeout {
		f["timeout_seconds"] = fmt.Sprintf("must be between 0 and %d", maxCommandTimeout)
	}
	if len(f) > 0 {
		return invalid(f)
	}
	return nil
}
