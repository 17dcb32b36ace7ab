package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/testenv"
)

// Bounds of the fault suite: liveness, not performance.
const (
	// faultServeBound is how long a restarted server may take to serve.
	faultServeBound = 90 * time.Second
	// faultKillBound is how long an armed step may take to be reached.
	faultKillBound = 2 * time.Minute
	// execBound is how long a 30 s exec may take to answer.
	execBound = 90 * time.Second
)

// faultCase is one named step of lifecycle work at which spaced is killed.
type faultCase struct {
	point string
	// prepare brings the victim sandbox to the state the step starts from
	// (it is running when prepare is called) and returns extra ids to check.
	prepare func(c *client, sbx string) (checkpoint string)
	// trigger sends the request whose work reaches the step.
	trigger func(c *client, sbx, checkpoint string)
}

// TestFaultInjection SIGKILLs spaced at each named step of create, pause,
// suspend, wake, checkpoint, restore, branch and delete (a spaced built with
// the faultinject tag kills itself there), restarts it, and checks that the
// server serves within a bound, every operation is terminal, every sandbox
// and checkpoint state is true (a running sandbox runs commands, keeps its
// files and its background process, and can write; a paused or suspended
// one wakes; a failed one says why), and nothing leaks (the harness checks
// VMMs, namespaces and mounts at the end).
func TestFaultInjection(t *testing.T) {
	srv := newServer(t, "--pool-size", "0")
	srv.binary = "spaced-faultinject"
	armFile := filepath.Join(filepath.Dir(srv.dataDir), "fault-point")
	srv.env = []string{"SPACE_FAULT_FILE=" + armFile}
	srv.start()

	// post sends a trigger. The armed step can be reached before the
	// answer is written (the operation starts as soon as it is submitted),
	// so a connection the dying server drops is an answer too; whether it
	// died at the armed step is checked after.
	post := func(c *client, path string, body any) {
		c.t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		req, err := http.NewRequest("POST", c.url+path, bytes.NewReader(b))
		if err != nil {
			c.t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+c.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpClient.Do(req)
		if err != nil {
			c.t.Logf("POST %s: the server went away before answering: %v", path, err)
			return
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 202 && resp.StatusCode != 201 {
			c.t.Fatalf("POST %s = %d %s", path, resp.StatusCode, answer)
		}
	}
	readyCheckpoint := func(c *client, sbx string) string {
		var ck apiv1.CheckpointAndOperation
		c.mustDo("POST", "/v1/sandboxes/"+sbx+"/checkpoints", map[string]any{}, &ck, 202)
		if op := c.waitOp(ck.Operation.ID); op.State != "succeeded" {
			c.t.Fatalf("checkpoint ended %s %+v", op.State, op.Error)
		}
		return ck.Checkpoint.ID
	}
	suspended := func(c *client, sbx string) string {
		var resp apiv1.OperationResponse
		c.mustDo("POST", "/v1/sandboxes/"+sbx+"/suspend", nil, &resp, 202)
		if op := c.waitOp(resp.Operation.ID); op.State != "succeeded" {
			c.t.Fatalf("suspend ended %s %+v", op.State, op.Error)
		}
		return ""
	}
	cases := []faultCase{
		{point: "create.recorded", trigger: func(c *client, _, _ string) { post(c, "/v1/sandboxes", map[string]any{"template": "base"}) }},
		{point: "create.started", trigger: func(c *client, _, _ string) { post(c, "/v1/sandboxes", map[string]any{"template": "base"}) }},
		{point: "pause.paused", trigger: func(c *client, sbx, _ string) { post(c, "/v1/sandboxes/"+sbx+"/pause", nil) }},
		{point: "suspend.recorded", trigger: func(c *client, sbx, _ string) { post(c, "/v1/sandboxes/"+sbx+"/suspend", nil) }},
		{point: "suspend.saved", trigger: func(c *client, sbx, _ string) { post(c, "/v1/sandboxes/"+sbx+"/suspend", nil) }},
		{point: "suspend.sealed", trigger: func(c *client, sbx, _ string) { post(c, "/v1/sandboxes/"+sbx+"/suspend", nil) }},
		{point: "wake.restored", prepare: suspended,
			trigger: func(c *client, sbx, _ string) { post(c, "/v1/sandboxes/"+sbx+"/wake", nil) }},
		{point: "checkpoint.paused", trigger: func(c *client, sbx, _ string) {
			post(c, "/v1/sandboxes/"+sbx+"/checkpoints", map[string]any{})
		}},
		{point: "checkpoint.sealed", trigger: func(c *client, sbx, _ string) {
			post(c, "/v1/sandboxes/"+sbx+"/checkpoints", map[string]any{})
		}},
		{point: "restore.abandoned", prepare: readyCheckpoint, trigger: func(c *client, sbx, ck string) {
			post(c, "/v1/sandboxes/"+sbx+"/restore", map[string]any{"checkpoint": ck})
		}},
		{point: "restore.restored", prepare: readyCheckpoint, trigger: func(c *client, sbx, ck string) {
			post(c, "/v1/sandboxes/"+sbx+"/restore", map[string]any{"checkpoint": ck})
		}},
		{point: "branch.restored", prepare: readyCheckpoint, trigger: func(c *client, _, ck string) {
			post(c, "/v1/sandboxes", map[string]any{"from_checkpoint": ck})
		}},
		{point: "delete.stopped", trigger: func(c *client, sbx, _ string) {
			c.mustDo("DELETE", "/v1/sandboxes/"+sbx, nil, nil, 202)
		}},
	}
	for _, fc := range cases {
		t.Run(fc.point, func(t *testing.T) {
			parent := srv.t
			srv.t = t
			defer func() { srv.t = parent }()
			runFaultCase(t, srv, armFile, fc)
		})
	}
}

func runFaultCase(t *testing.T, srv *server, armFile string, fc faultCase) {
	// Registered first, so it runs after the log is printed.
	t.Cleanup(func() {
		if t.Failed() {
			os.Remove(armFile)
			srv.resetAfterFailure(t)
		}
	})
	t.Cleanup(func() {
		if t.Failed() && srv.log != nil {
			t.Logf("spaced log of this case (tail):\n%s", srv.logTail(12000))
		}
	})
	c := srv.client(srv.AdminKey)
	c.t = t
	victim := c.createSandbox(nil)
	// What must survive wherever the sandbox ends running: a file and a
	// background process.
	mustExec(t, c, victim.ID, "echo kept > /root/kept && (while :; do date +%s%N > /root/tick; sleep 0.2; done) >/dev/null 2>&1 &")
	var ck string
	if fc.prepare != nil {
		ck = fc.prepare(c, victim.ID)
	}
	if err := os.WriteFile(armFile, []byte(fc.point), 0o600); err != nil {
		t.Fatal(err)
	}
	pid := srv.cmd.Process.Pid
	fc.trigger(c, victim.ID, ck)
	deadline := time.Now().Add(faultKillBound)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			os.Remove(armFile)
			t.Fatalf("spaced never reached %s", fc.point)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(armFile); err == nil {
		os.Remove(armFile)
		t.Fatalf("spaced died before reaching %s", fc.point)
	}
	srv.cmd = nil
	started := time.Now()
	srv.start()
	t.Logf("%s: restarted spaced served after %s", fc.point, time.Since(started).Round(time.Millisecond))
	if time.Since(started) > faultServeBound {
		t.Errorf("restart after a crash at %s took %s to serve", fc.point, time.Since(started))
	}
	c = srv.client(srv.AdminKey)
	c.t = t
	checkAllTerminal(t, c)
	checkSandboxesTrue(t, c, victim.ID)
	checkCheckpointsTrue(t, c)
	leaveNothing(t, c, srv.dataDir)
}

// leaveNothing deletes every checkpoint and sandbox, and waits until no
// VMM of the data dir runs: what the next case starts from.
func leaveNothing(t *testing.T, c *client, dataDir string) {
	t.Helper()
	var list apiv1.SandboxList
	c.mustDo("GET", "/v1/sandboxes?page_size=1000", nil, &list, 200)
	for _, sb := range list.Sandboxes {
		if sb.State == "deleted" {
			continue
		}
		var cks apiv1.CheckpointList
		c.mustDo("GET", "/v1/sandboxes/"+sb.ID+"/checkpoints", nil, &cks, 200)
		for _, k := range cks.Checkpoints {
			c.mustDo("DELETE", "/v1/checkpoints/"+k.ID, nil, nil, 204)
		}
		if sb.State != "deleting" {
			c.deleteSandbox(sb.ID)
		}
	}
	waitNoVMMs(t, dataDir)
}

// resetAfterFailure gives the next case on this server what a passing case
// leaves: spaced serving, no sandbox, no VMM. A failed case can stop
// anywhere (spaced killed and not restarted, a VMM of the dead spaced still
// running, sandboxes half made), so it kills spaced and every VMM of the
// data dir by PID, restarts spaced (recovery finds those VMMs gone and
// fails their sandboxes) and deletes what is left.
// It runs as a cleanup of the failed case, t, after the case's function
// returned (and gave s back its parent's t), so it takes t again.
func (s *server) resetAfterFailure(t *testing.T) {
	t.Helper()
	parent := s.t
	s.t = t
	defer func() { s.t = parent }()
	s.kill()
	if pids := killVMMs(s.dataDir); len(pids) > 0 {
		t.Logf("reset after the failed case: killed VMMs %v", pids)
	}
	s.start()
	c := s.client(s.AdminKey)
	leaveNothing(t, c, s.dataDir)
}

// checkAllTerminal waits (bounded) until no operation is pending or running:
// recovery ends interrupted ones and finishes resubmitted deletes.
func checkAllTerminal(t *testing.T, c *client) {
	t.Helper()
	deadline := time.Now().Add(faultKillBound)
	for {
		var ops apiv1.OperationList
		c.mustDo("GET", "/v1/operations?page_size=1000", nil, &ops, 200)
		var open []string
		for _, op := range ops.Operations {
			if op.State != "succeeded" && op.State != "failed" && op.State != "cancelled" {
				open = append(open, op.Type+" "+op.ID+" "+op.State)
			}
		}
		if len(open) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("operations never ended after restart: %v", open)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkSandboxesTrue checks every sandbox's state against what it can do.
func checkSandboxesTrue(t *testing.T, c *client, victim string) {
	t.Helper()
	var list apiv1.SandboxList
	c.mustDo("GET", "/v1/sandboxes?page_size=1000", nil, &list, 200)
	for _, sb := range list.Sandboxes {
		switch sb.State {
		case "running":
			if sb.ID == victim {
				checkKept(t, c, sb.ID)
			} else {
				mustExec(t, c, sb.ID, "true")
			}
		case "paused", "suspended":
			var resp apiv1.OperationResponse
			c.mustDo("POST", "/v1/sandboxes/"+sb.ID+"/wake", nil, &resp, 202)
			if op := c.waitOp(resp.Operation.ID); op.State != "succeeded" {
				t.Fatalf("%s %s: wake ended %s %+v", sb.State, sb.ID, op.State, op.Error)
			}
			if sb.ID == victim {
				checkKept(t, c, sb.ID)
			}
		case "failed":
			if sb.LastError == nil || sb.LastError.Message == "" {
				t.Errorf("failed sandbox %s says not why", sb.ID)
			}
		case "deleted":
		default:
			t.Errorf("sandbox %s left %s after restart", sb.ID, sb.State)
		}
	}
}

// checkKept checks that the victim kept its file and background process,
// and that its filesystem is writable (not left frozen).
func checkKept(t *testing.T, c *client, id string) {
	t.Helper()
	// The ticker writes every 0.2 s; give a starved guest 10 s to show one.
	out := mustExec(t, c, id, "cat /root/kept; a=$(cat /root/tick); i=0; while [ $i -lt 100 ]; do "+
		"sleep 0.1; [ \"$a\" != \"$(cat /root/tick)\" ] && echo ticking && break; i=$((i+1)); done; "+
		"echo w > /root/written && echo writable")
	for _, want := range []string{"kept", "ticking", "writable"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox %s after restart: %q lacks %q", id, out, want)
		}
	}
}

// checkCheckpointsTrue checks that no checkpoint is left creating and that
// failed ones can be deleted.
func checkCheckpointsTrue(t *testing.T, c *client) {
	t.Helper()
	var list apiv1.SandboxList
	c.mustDo("GET", "/v1/sandboxes?page_size=1000", nil, &list, 200)
	for _, sb := range list.Sandboxes {
		var cks apiv1.CheckpointList
		c.mustDo("GET", "/v1/sandboxes/"+sb.ID+"/checkpoints", nil, &cks, 200)
		for _, ck := range cks.Checkpoints {
			switch ck.State {
			case "ready":
			case "failed":
				c.mustDo("DELETE", "/v1/checkpoints/"+ck.ID, nil, nil, 204)
			default:
				t.Errorf("checkpoint %s left %s after restart", ck.ID, ck.State)
			}
		}
	}
}

// mustExec runs a shell command with a bounded timeout and returns stdout.
func mustExec(t *testing.T, c *client, sbx, shell string) string {
	t.Helper()
	var res apiv1.ExecResponse
	body, _ := json.Marshal(map[string]any{"shell": shell, "timeout_seconds": 30})
	req, _ := http.NewRequest("POST", c.url+"/v1/sandboxes/"+sbx+"/exec", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: execBound}).Do(req)
	if err != nil {
		t.Fatalf("exec %q in %s: %v", shell, sbx, err)
	}
	defer resp.Body.Close()
	st := resp.StatusCode
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &res)
	if st != 200 || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("exec %q in %s = %d %s", shell, sbx, st, raw)
	}
	return res.Stdout
}

// waitNoVMMs waits (bounded) until no VMM of the data dir runs.
func waitNoVMMs(t *testing.T, dataDir string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() error {
		if pids := serverVMMs(dataDir); len(pids) > 0 {
			return fmt.Errorf("VMMs still running after every sandbox was deleted: %v", pids)
		}
		return nil
	})
}
