package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/testenv"
)

// counterScript counts in a background command: each tick writes the count
// to /tmp/count and prints it.
const counterScript = "mkdir -p /tmp; i=0; while true; do i=$((i+1)); echo $i > /tmp/count; echo tick$i; sleep 0.1; done"

// TestLifecycle runs one sandbox with a background counter through pause,
// wake, suspend, a restart of spaced, wake, checkpoint, branch and restore,
// and a second one through expiry. The counter must continue, never
// restart; files must be intact and branches isolated.
func TestLifecycle(t *testing.T) {
	srv := startServer(t)
	c := srv.client(srv.AdminKey)

	// Expiry runs in the background while the rest goes on.
	expiring := c.createSandbox(map[string]any{"timeout_seconds": 2})

	sbx := c.createSandbox(nil)
	var cmd apiv1.CommandResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/commands", map[string]any{"shell": counterScript}, &cmd, 201)
	resp := c.request("GET", "/v1/sandboxes/"+sbx.ID+"/commands/"+cmd.Command.ID+"/events", nil, nil)
	resp.Body.Close() // the first attach starts it
	waitState(t, c, sbx.ID, cmd.Command.ID, "running")
	n := waitCount(t, c, sbx.ID, 1)

	// pause -> paused; wrong-state calls get 409 with the state.
	lifecycle(t, c, sbx.ID, "pause", "paused")
	wantState409(t, c, "POST", "/v1/sandboxes/"+sbx.ID+"/pause", "paused")
	wantState409(t, c, "POST", "/v1/sandboxes/"+sbx.ID+"/exec", "paused")
	lifecycle(t, c, sbx.ID, "wake", "running")
	n = waitCount(t, c, sbx.ID, n+1) // continues from where it was
	wantState409(t, c, "POST", "/v1/sandboxes/"+sbx.ID+"/wake", "running")

	// A stream attached across the suspend ends, if at all, without an exit.
	across := make(chan []apiv1.Event, 1)
	go func() { across <- readEvents(t, c, sbx.ID, cmd.Command.ID, 0, 1<<30) }()
	// suspend -> suspended, across a restart of spaced.
	lifecycle(t, c, sbx.ID, "suspend", "suspended")
	var got apiv1.Sandbox
	c.mustDo("GET", "/v1/sandboxes/"+sbx.ID, nil, &got, 200)
	if got.Usage == nil || got.Usage.SnapshotBytes == 0 {
		t.Errorf("suspended sandbox usage = %+v", got.Usage)
	}
	wantState409(t, c, "POST", "/v1/sandboxes/"+sbx.ID+"/exec", "suspended")
	wantState409(t, c, "POST", "/v1/sandboxes/"+sbx.ID+"/commands", "suspended")
	srv.stop()
	srv.start()
	c = srv.client(srv.AdminKey)
	c.mustDo("GET", "/v1/sandboxes/"+sbx.ID, nil, &got, 200)
	if got.State != "suspended" {
		t.Fatalf("suspended sandbox after a restart of spaced: %s", got.State)
	}
	lifecycle(t, c, sbx.ID, "wake", "running")
	n = waitCount(t, c, sbx.ID, n+1)
	select {
	case evs := <-across:
		for _, ev := range evs {
			if ev.Type == "exit" {
				t.Fatalf("a stream across suspend invented an exit: %+v", ev)
			}
		}
	case <-time.After(time.Minute):
		t.Fatal("a stream attached across suspend and a restart never ended")
	}

	// The event stream reattached after wake with after continues.
	last := uint64(0)
	evs := readEvents(t, c, sbx.ID, cmd.Command.ID, 0, 3)
	for _, ev := range evs {
		last = ev.Seq
	}
	more := readEvents(t, c, sbx.ID, cmd.Command.ID, last, 3)
	if len(more) == 0 || more[0].Seq != last+1 {
		t.Errorf("reattach after %d: %+v", last, more)
	}
	for _, ev := range append(evs, more...) {
		if ev.Type == "exit" {
			t.Fatalf("exit event of a command still running: %+v", ev)
		}
	}

	// keep extends expires_at.
	var kept apiv1.Sandbox
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/keep", map[string]any{"timeout_seconds": 3600}, &kept, 200)
	if kept.ExpiresAt == nil || time.Until(*kept.ExpiresAt) < 3500*time.Second {
		t.Errorf("keep: expires_at %v", kept.ExpiresAt)
	}

	// checkpoint -> branch -> isolated files -> restore in place.
	putFile(t, c, sbx.ID, "/root/f", "v1")
	var ck apiv1.CheckpointAndOperation
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/checkpoints", map[string]any{"name": "v1"}, &ck, 202)
	if op := c.waitOp(ck.Operation.ID); op.State != "succeeded" {
		t.Fatalf("checkpoint: %s %+v", op.State, op.Error)
	}
	putFile(t, c, sbx.ID, "/root/f", "v2")
	var br apiv1.SandboxAndOperation
	c.mustDo("POST", "/v1/sandboxes", map[string]any{"from_checkpoint": ck.Checkpoint.ID}, &br, 202)
	if op := c.waitOp(br.Operation.ID); op.State != "succeeded" || op.Type != "branch" {
		t.Fatalf("branch: %s %s %+v", op.Type, op.State, op.Error)
	}
	if f := getFile(t, c, br.Sandbox.ID, "/root/f"); f != "v1" {
		t.Errorf("branch sees %q", f)
	}
	waitCount(t, c, br.Sandbox.ID, readCount(t, c, br.Sandbox.ID)+1) // the counter runs on in the branch
	putFile(t, c, br.Sandbox.ID, "/root/f", "branch")
	if f := getFile(t, c, sbx.ID, "/root/f"); f != "v2" {
		t.Errorf("parent sees %q after the branch wrote", f)
	}
	// The counter is a command session of the branch, with an id of its own
	// (beside it: the parent's ended execs, inherited as exited, and the
	// branch's own).
	var brCmds apiv1.CommandList
	c.mustDo("GET", "/v1/sandboxes/"+br.Sandbox.ID+"/commands", nil, &brCmds, 200)
	brCmd := ""
	for _, bc := range brCmds.Commands {
		switch {
		case bc.Shell == counterScript && bc.State == "running" && bc.ID != cmd.Command.ID && bc.StartedAt != nil && brCmd == "":
			brCmd = bc.ID
		case bc.Shell == counterScript || bc.State != "exited":
			t.Errorf("branch command %+v", bc)
		}
	}
	if brCmd == "" {
		t.Fatalf("the branch has no counter: %+v", brCmds.Commands)
	}
	// Its events (output from before the checkpoint included) resume with after.
	evs = readEvents(t, c, br.Sandbox.ID, brCmd, 0, 3)
	if len(evs) != 3 {
		t.Fatalf("branch command events: %+v", evs)
	}
	if again := readEvents(t, c, br.Sandbox.ID, brCmd, evs[1].Seq, 1); len(again) != 1 || again[0].Seq != evs[2].Seq {
		t.Fatalf("branch command events after %d: %+v, want seq %d", evs[1].Seq, again, evs[2].Seq)
	}
	// Signalled in the branch, it ends there; the parent's counter runs on.
	c.mustDo("POST", "/v1/sandboxes/"+br.Sandbox.ID+"/commands/"+brCmd+"/signal", map[string]any{"signal": "SIGKILL"}, nil, 204)
	waitState(t, c, br.Sandbox.ID, brCmd, "exited")
	waitCount(t, c, sbx.ID, readCount(t, c, sbx.ID)+1)
	var parentCmd apiv1.CommandResponse
	c.mustDo("GET", "/v1/sandboxes/"+sbx.ID+"/commands/"+cmd.Command.ID, nil, &parentCmd, 200)
	if parentCmd.Command.State != "running" {
		t.Errorf("parent's counter after the branch's was killed: %+v", parentCmd.Command)
	}
	var op apiv1.OperationResponse
	c.mustDo("POST", "/v1/sandboxes/"+sbx.ID+"/restore", map[string]any{"checkpoint": ck.Checkpoint.ID}, &op, 202)
	if done := c.waitOp(op.Operation.ID); done.State != "succeeded" {
		t.Fatalf("restore: %s %+v", done.State, done.Error)
	}
	if f := getFile(t, c, sbx.ID, "/root/f"); f != "v1" {
		t.Errorf("restored parent sees %q", f)
	}
	// The restored guest runs the counter of the checkpoint: still the same command.
	waitState(t, c, sbx.ID, cmd.Command.ID, "running")
	waitCount(t, c, sbx.ID, readCount(t, c, sbx.ID)+1)
	if f := getFile(t, c, br.Sandbox.ID, "/root/f"); f != "branch" {
		t.Errorf("branch sees %q after the parent's restore", f)
	}
	c.deleteSandbox(br.Sandbox.ID)
	c.mustDo("DELETE", "/v1/checkpoints/"+ck.Checkpoint.ID, nil, nil, 204)
	c.mustDo("GET", "/v1/checkpoints/"+ck.Checkpoint.ID, nil, nil, 404)

	// Expiry deleted the other sandbox through a delete operation.
	testenv.Eventually(t, time.Minute, func() error {
		var e apiv1.Sandbox
		c.mustDo("GET", "/v1/sandboxes/"+expiring.ID, nil, &e, 200)
		if e.State != "deleted" {
			return fmt.Errorf("expired sandbox is %s", e.State)
		}
		return nil
	})
	var ops apiv1.OperationList
	c.mustDo("GET", "/v1/operations?target="+expiring.ID, nil, &ops, 200)
	if len(ops.Operations) == 0 || ops.Operations[0].Type != "delete" || ops.Operations[0].State != "succeeded" {
		t.Errorf("expiry operations: %+v", ops.Operations)
	}
	waitNoVMM(t, expiring.ID)
	c.deleteSandbox(sbx.ID)
}

// lifecycle calls POST …/verb, waits for the operation and checks the state.
func lifecycle(t *testing.T, c *client, id, verb, want string) {
	t.Helper()
	var resp apiv1.OperationResponse
	c.mustDo("POST", "/v1/sandboxes/"+id+"/"+verb, nil, &resp, 202)
	if resp.Operation.Type != verb {
		t.Errorf("%s operation type %q", verb, resp.Operation.Type)
	}
	if op := c.waitOp(resp.Operation.ID); op.State != "succeeded" {
		t.Fatalf("%s: %s %+v", verb, op.State, op.Error)
	}
	var sb apiv1.Sandbox
	c.mustDo("GET", "/v1/sandboxes/"+id, nil, &sb, 200)
	if sb.State != want {
		t.Fatalf("after %s: %s, want %s", verb, sb.State, want)
	}
}

func wantState409(t *testing.T, c *client, method, path, state string) {
	t.Helper()
	var eb apiv1.ErrorBody
	body := map[string]any{"argv": []string{"true"}}
	if st := c.do(method, path, body, &eb); st != 409 || eb.Error.Details["state"] != state {
		t.Errorf("%s %s = %d %+v, want 409 with state %s", method, path, st, eb.Error, state)
	}
}

func readCount(t *testing.T, c *client, id string) int {
	t.Helper()
	var res apiv1.ExecResponse
	c.mustDo("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"cat", "/tmp/count"}}, &res, 200)
	n, _ := strconv.Atoi(strings.TrimSpace(res.Stdout))
	return n
}

// waitCount waits until the counter reaches at least min and returns it.
func waitCount(t *testing.T, c *client, id string, min int) int {
	t.Helper()
	var n int
	testenv.Eventually(t, time.Minute, func() error {
		if n = readCount(t, c, id); n < min {
			return fmt.Errorf("counter of %s stays below %d (it restarted or stopped)", id, min)
		}
		return nil
	})
	return n
}

func putFile(t *testing.T, c *client, id, path, data string) {
	t.Helper()
	resp := c.request("PUT", "/v1/sandboxes/"+id+"/files?path="+path, strings.NewReader(data), nil)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("put %s: %d", path, resp.StatusCode)
	}
}

func getFile(t *testing.T, c *client, id, path string) string {
	t.Helper()
	resp := c.request("GET", "/v1/sandboxes/"+id+"/files?path="+path, nil, nil)
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text())
	}
	if resp.StatusCode != 200 {
		t.Fatalf("get %s: %d %s", path, resp.StatusCode, b.String())
	}
	return b.String()
}

// readEvents reads up to n events with seq > after from a command's stream
// and hangs up.
func readEvents(t *testing.T, c *client, sbx, cmd string, after uint64, n int) []apiv1.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/sandboxes/%s/commands/%s/events?after=%d", c.url, sbx, cmd, after), nil)
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var evs []apiv1.Event
	sc := bufio.NewScanner(resp.Body)
	for len(evs) < n && sc.Scan() {
		var ev apiv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event line %q: %v", sc.Text(), err)
		}
		if ev.Type != "heartbeat" {
			evs = append(evs, ev)
		}
	}
	return evs
}
