package api

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
)

func toOperation(op *store.Operation) apiv1.Operation {
	out := apiv1.Operation{
		ID: op.ID, Type: string(op.Type), Target: op.Target, State: string(op.State),
		Result: op.Result, CreatedAt: op.CreatedAt.UTC(), UpdatedAt: op.UpdatedAt.UTC(), DoneAt: utcPtr(op.DoneAt),
	}
	if op.Progress != nil {
		out.Progress = &apiv1.Progress{Step: op.Progress.Step, Percent: op.Progress.Percent}
	}
	if op.Error != nil {
		out.Error = &apiv1.OpError{Code: op.Error.Code, Message: op.Error.Message}
	}
	return out
}

func toSandbox(sb *store.Sandbox) apiv1.Sandbox {
	out := apiv1.Sandbox{
		ID: sb.ID, Template: sb.Template, TemplateDigest: sb.TemplateDigest, State: string(sb.State),
		VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB, DiskMiB: sb.DiskMiB, Metadata: sb.Metadata,
		Network: sb.Network, Worker: sb.Worker, CreatedAt: sb.CreatedAt.UTC(), ExpiresAt: utcPtr(sb.ExpiresAt),
	}
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	if sb.LastError != nil {
		out.LastError = &apiv1.OpError{Code: sb.LastError.Code, Message: sb.LastError.Message}
	}
	return out
}

func toCommand(c *store.Command) apiv1.Command {
	var spec agentproto.ProcessSpec
	_ = json.Unmarshal(c.Spec, &spec) // written by us; a bad record shows an empty spec
	out := apiv1.Command{
		ID: c.ID, Sandbox: c.SandboxID, Argv: spec.Argv, Shell: spec.Shell, Cwd: spec.Cwd, Env: spec.Env,
		User: spec.User, Stdin: spec.Stdin, TimeoutSeconds: spec.TimeoutSeconds,
		State: string(c.State), PID: c.PID, CreatedAt: c.CreatedAt.UTC(), StartedAt: utcPtr(c.StartedAt),
	}
	if spec.PTY != nil {
		out.PTY = &apiv1.PTY{Rows: int(spec.PTY.Rows), Cols: int(spec.PTY.Cols)}
	}
	if ex, ok := sandbox.DecodeExit(c); ok {
		st := wireExit(ex)
		out.Exit = &st
	}
	return out
}

// toExitStatus is an agent's exit in the API's form.
func toExitStatus(e *agentproto.ExitStatus) apiv1.ExitStatus { return wireExit(sandbox.ExitOf(e, 0)) }

// wireExit is a stored exit in the API's form.
func wireExit(ex sandbox.Exit) apiv1.ExitStatus {
	return apiv1.ExitStatus{ExitCode: ex.ExitCode, Signal: ex.Signal, Reason: ex.Reason, EndedAt: ex.EndedAt}
}

func toFileInfo(f agentproto.FileInfo) apiv1.FileInfo {
	return apiv1.FileInfo{Name: f.Name, Type: f.Type, Size: f.Size,
		Mode: "0" + strconv.FormatUint(uint64(f.Mode&0o7777), 8), MTime: f.MTime.UTC()}
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// pathID checks that a path value looks like an id of the given prefix; a
// malformed id cannot exist, so it is 404 like any unknown one.
func validID(id, prefix string) bool {
	return store.HasPrefix(id, prefix) && len(id) <= 64 && !strings.ContainsAny(id, "/ \t\n")
}
