package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/testenv"
)

// TestCrashDuringCreate SIGKILLs spaced while a create runs. After a
// restart the operation is terminal (failed, aborted), the sandbox says
// failed, and no VM of it remains.
func TestCrashDuringCreate(t *testing.T) {
	srv := startServer(t)
	c := srv.client(srv.AdminKey)
	var created apiv1.SandboxAndOperation
	c.mustDo("POST", "/v1/sandboxes", map[string]any{"template": "base"}, &created, 202)
	// Wait until the create is under way (its VMM started), then crash.
	testenv.Eventually(t, 2*time.Minute, func() error {
		if len(vmmPIDs(created.Sandbox.ID)) == 0 {
			return errors.New("create never started a VMM")
		}
		return nil
	})
	srv.kill()
	srv.start()
	c = srv.client(srv.AdminKey)
	op := c.waitOp(created.Operation.ID)
	if op.State != "failed" || op.Error == nil || op.Error.Code != "aborted" {
		t.Errorf("interrupted create = %s %+v, want failed/aborted", op.State, op.Error)
	}
	var sb apiv1.Sandbox
	c.mustDo("GET", "/v1/sandboxes/"+created.Sandbox.ID, nil, &sb, 200)
	if sb.State != "failed" {
		t.Errorf("sandbox after an interrupted create = %s", sb.State)
	}
	waitNoVMM(t, created.Sandbox.ID)
	// The server still works after recovery.
	next := c.createSandbox(nil)
	c.deleteSandbox(next.ID)
}

// TestCrashAdoptsRunning SIGKILLs spaced with a sandbox running a command.
// The restarted server adopts the VM: the command's stream is reattached
// with after, and new commands run.
func TestCrashAdoptsRunning(t *testing.T) {
	srv := startServer(t)
	c := srv.client(srv.AdminKey)
	sbx := c.createSandbox(nil)
	var cmd apiv1.CommandResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/commands", map[string]any{
		"shell": "i=0; while [ $i -lt 30 ]; do echo tick$i; i=$((i+1)); sleep 0.1; done"}, &cmd, 201)
	resp := c.request("GET", "/v1/sandboxes/"+sbx.ID+"/commands/"+cmd.Command.ID+"/events", nil, nil)
	resp.Body.Close() // attach once: the command starts
	waitState(t, c, sbx.ID, cmd.Command.ID, "running")
	srv.kill()
	srv.start()
	c = srv.client(srv.AdminKey)
	evs := c.events(sbx.ID, cmd.Command.ID, 1)
	out := stdoutOf(evs)
	if !strings.HasPrefix(out, "tick0\n") || !strings.Contains(out, "tick29\n") {
		t.Errorf("reattached output after a crash = %q", out)
	}
	if ex := lastEvent(t, evs); ex.Type != "exit" || ex.ExitCode == nil || *ex.ExitCode != 0 {
		t.Errorf("exit after adoption = %+v", ex)
	}
	var res apiv1.ExecResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/exec", map[string]any{"argv": []string{"echo", "adopted"}}, &res, 200)
	if res.Stdout != "adopted\n" {
		t.Errorf("exec after adoption = %q", res.Stdout)
	}
	c.deleteSandbox(sbx.ID)
	waitNoVMM(t, sbx.ID)
}

func waitNoVMM(t *testing.T, id string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if pids := vmmPIDs(id); len(pids) > 0 {
			return fmt.Errorf("VMM of %s still runs: %v", id, pids)
		}
		return nil
	})
}
