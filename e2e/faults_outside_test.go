package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/testenv"
)

// TestFaultsFromOutside breaks a sandbox from the host while spaced runs: its
// agent link stalled (the VMM stopped with SIGSTOP: the socket stays open,
// nothing answers) and its VMM killed. The server's own deadlines must end
// what waits on the guest, and a dead VMM must fail the sandbox with a
// reason and its commands lost.
func TestFaultsFromOutside(t *testing.T) {
	srv := startServer(t, "--pool-size", "0")
	c := srv.client(srv.AdminKey)

	t.Run("agent link stalled", func(t *testing.T) {
		c := *c
		c.t = t
		sb := c.createSandbox(nil)
		pid := onlyVMM(t, sb.ID)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := true
		defer func() {
			if stopped {
				syscall.Kill(pid, syscall.SIGCONT)
			}
		}()
		// exec with a 3 s timeout: the guest cannot answer, so the server
		// ends the command itself (timeout, or lost when the link is gone).
		started := time.Now()
		var res apiv1.ExecResponse
		st := c.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"shell": "echo hi", "timeout_seconds": 3}, &res)
		t.Logf("exec into a stalled guest answered %d %q after %s", st, res.Reason, time.Since(started).Round(time.Millisecond))
		if st == 200 && res.Reason != "timeout" && res.Reason != "lost" {
			t.Errorf("exec into a stalled guest = %+v, want reason timeout or lost", res)
		}
		if st != 200 && st != 504 && st != 503 {
			t.Errorf("exec into a stalled guest = %d", st)
		}
		// Reads of the sandbox and its commands do not wait on the guest.
		for _, path := range []string{"/v1/sandboxes/" + sb.ID, "/v1/sandboxes/" + sb.ID + "/commands"} {
			started := time.Now()
			if st := c.do("GET", path, nil, nil); st != 200 {
				t.Errorf("GET %s with a stalled guest = %d", path, st)
			}
			t.Logf("GET %s with a stalled guest: %s", path, time.Since(started).Round(time.Millisecond))
		}
		syscall.Kill(pid, syscall.SIGCONT)
		stopped = false
		// The link recovers once the VMM runs: the host redials the agent,
		// and until it has (a guest that was stopped for seconds, on a
		// loaded host, answers its handshake late) an exec is 503.
		testenv.Eventually(t, 30*time.Second, func() error {
			var res apiv1.ExecResponse
			st := c.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"shell": "true", "timeout_seconds": 10}, &res)
			switch {
			case st == 200 && res.ExitCode != nil && *res.ExitCode == 0:
				return nil
			case st == 503:
				return fmt.Errorf("exec after SIGCONT: 503")
			}
			t.Fatalf("exec after SIGCONT = %d %+v", st, res)
			return nil
		})
		c.deleteSandbox(sb.ID)
	})

	t.Run("VMM killed", func(t *testing.T) {
		c := *c
		c.t = t
		sb := c.createSandbox(nil)
		var cmd apiv1.CommandResponse
		c.mustDo("POST", "/v1/sandboxes/"+sb.ID+"/commands", map[string]any{"shell": "sleep 600"}, &cmd, 201)
		resp := c.request("GET", "/v1/sandboxes/"+sb.ID+"/commands/"+cmd.Command.ID+"/events", nil, nil)
		resp.Body.Close() // attach once: the command starts
		waitState(t, &c, sb.ID, cmd.Command.ID, "running")
		pid := onlyVMM(t, sb.ID)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		var got apiv1.Sandbox
		for {
			c.mustDo("GET", "/v1/sandboxes/"+sb.ID, nil, &got, 200)
			if got.State == "failed" || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if got.State != "failed" || got.LastError == nil || got.LastError.Message == "" {
			t.Fatalf("sandbox after its VMM was killed: %s %+v, want failed with a reason", got.State, got.LastError)
		}
		evs := c.events(sb.ID, cmd.Command.ID, 0)
		if last := lastEvent(t, evs); last.Type != "exit" || last.Reason != "lost" {
			t.Errorf("command of a killed VMM ended %+v, want exit lost", last)
		}
		c.deleteSandbox(sb.ID)
	})
}

// onlyVMM returns the pid of the one VMM whose command line names id.
func onlyVMM(t *testing.T, id string) int {
	t.Helper()
	pids := vmmPIDs(id)
	if len(pids) != 1 {
		t.Fatalf("VMMs of %s: %v, want one", id, fmt.Sprint(pids))
	}
	return pids[0]
}
