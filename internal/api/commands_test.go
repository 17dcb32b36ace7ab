package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
)

// collect reads a stream to its exit event.
func collect(t *testing.T, s *client.EventStream) (stdout, stderr string, exit apiv1.Event) {
	t.Helper()
	var o, e strings.Builder
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("stream ended before exit: %v", err)
		}
		switch ev.Type {
		case apiv1.EventStdout:
			o.Write(ev.Bytes())
		case apiv1.EventStderr:
			e.Write(ev.Bytes())
		case apiv1.EventExit:
			return o.String(), e.String(), ev
		}
	}
}

func TestCommandSession(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	sb := e.running(e.alice, nil)
	cmd, err := e.alice.CreateCommand(ctx, sb.ID, apiv1.CreateCommandRequest{Shell: "echo hello; echo oops >&2; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.State != apiv1.CommandCreated {
		t.Fatalf("new command state %s", cmd.State)
	}
	// Not started until the first attach.
	if got, _ := e.alice.GetCommand(ctx, sb.ID, cmd.ID); got.State != apiv1.CommandCreated {
		t.Fatalf("started before attach: %s", got.State)
	}
	s, err := e.alice.Events(ctx, sb.ID, cmd.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, exit := collect(t, s)
	s.Close()
	if out != "hello\n" || errOut != "oops\n" || exit.ExitCode == nil || *exit.ExitCode != 3 || exit.Reason != "exited" {
		t.Fatalf("out %q err %q exit %+v", out, errOut, exit)
	}
	got, err := e.alice.GetCommand(ctx, sb.ID, cmd.ID)
	if err != nil || got.State != apiv1.CommandExited || got.Exit == nil || *got.Exit.ExitCode != 3 || got.PID == 0 {
		t.Fatalf("command after exit: %+v %v", got, err)
	}
	// Reattach with after replays only what follows.
	s2, err := e.alice.Events(ctx, sb.ID, cmd.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := s2.Next()
	s2.Close()
	if first.Seq != 2 {
		t.Errorf("replay after 1 starts at seq %d", first.Seq)
	}
	l, err := e.alice.ListCommands(ctx, sb.ID, client.Page{})
	if err != nil || len(l.Commands) != 1 {
		t.Errorf("list commands: %+v %v", l, err)
	}
	// Other tenants get 404 for the command, too.
	if _, err := e.bob.GetCommand(ctx, sb.ID, cmd.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("bob: %v", err)
	}
	status, _, body := e.do("POST", "/v1/sandboxes/"+sb.ID+"/commands", e.aliceKey, []byte(`{"argv":["x"],"shell":"y"}`))
	wantError(t, status, body, 400, "invalid_argument")
	status, _, body = e.do("POST", "/v1/sandboxes/"+sb.ID+"/commands", e.aliceKey, []byte(`{"argv":["x"],"cwd":"rel"}`))
	wantError(t, status, body, 400, "invalid_argument")
}

func TestCommandStdinSignalSSE(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	sb := e.running(e.alice, nil)
	cmd, err := e.alice.CreateCommand(ctx, sb.ID, apiv1.CreateCommandRequest{Argv: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	// Writing stdin starts the command; the output waits in the agent.
	if err := e.alice.Stdin(ctx, sb.ID, cmd.ID, strings.NewReader("ping\n"), true); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", e.http.URL+"/v1/sandboxes/"+sb.ID+"/commands/"+cmd.ID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+e.aliceKey)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var ids []string
	var out strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if id, ok := strings.CutPrefix(line, "id: "); ok {
			ids = append(ids, id)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var ev apiv1.Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatal(err)
			}
			out.Write(ev.Bytes())
			if ev.Type == apiv1.EventExit {
				break
			}
		}
	}
	if out.String() != "ping\n" || len(ids) < 3 || ids[0] != "1" {
		t.Errorf("SSE out %q ids %v", out.String(), ids)
	}
	// Last-Event-ID resumes like after=.
	status, _, body := e.do("GET", "/v1/sandboxes/"+sb.ID+"/commands/"+cmd.ID+"/events", e.aliceKey, nil,
		"Accept", "text/event-stream", "Last-Event-ID", ids[len(ids)-2])
	if status != 200 || strings.Count(string(body), "data: ") != 1 || !strings.Contains(string(body), `"type":"exit"`) {
		t.Errorf("resume with Last-Event-ID: %d %s", status, body)
	}

	// Stdin to an exited command and stdin without stdin are refused.
	var ce *client.Error
	if err := e.alice.Stdin(ctx, sb.ID, cmd.ID, strings.NewReader("x"), false); !errors.As(err, &ce) || ce.Status != 409 {
		t.Errorf("stdin after exit: %v", err)
	}

	sleeper, _ := e.alice.CreateCommand(ctx, sb.ID, apiv1.CreateCommandRequest{Argv: []string{"sleep", "60"}})
	if err := e.alice.Signal(ctx, sb.ID, sleeper.ID, "SIGTERM"); !errors.As(err, &ce) || ce.Status != 409 || ce.Details["state"] != "created" {
		t.Errorf("signal before start: %v", err)
	}
	if err := e.alice.Stdin(ctx, sb.ID, sleeper.ID, strings.NewReader("x"), false); !errors.As(err, &ce) || ce.Status != 412 {
		t.Errorf("stdin without stdin: %v", err)
	}
	s, err := e.alice.Events(ctx, sb.ID, sleeper.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ev, err := s.Next(); err != nil || ev.Type != apiv1.EventStarted {
		t.Fatalf("first event %+v %v", ev, err)
	}
	if err := e.alice.Signal(ctx, sb.ID, sleeper.ID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	_, _, exit := collect(t, s)
	if exit.ExitCode != nil || exit.Signal == nil || *exit.Signal != "SIGKILL" || exit.Reason != "killed" {
		t.Errorf("killed exit: %+v", exit)
	}
}

func TestHeartbeatAndDeleteEndsStream(t *testing.T) {
	e := newEnv(t, Config{Heartbeat: 20 * time.Millisecond})
	ctx := t.Context()
	sb := e.running(e.alice, nil)
	cmd, _ := e.alice.CreateCommand(ctx, sb.ID, apiv1.CreateCommandRequest{Argv: []string{"sleep", "60"}})
	req, _ := http.NewRequestWithContext(ctx, "GET", e.http.URL+"/v1/sandboxes/"+sb.ID+"/commands/"+cmd.ID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+e.aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sawHeartbeat := false
	deleted := false
	var last apiv1.Event
	for sc.Scan() {
		var ev apiv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		last = ev
		if ev.Type == apiv1.EventHeartbeat {
			sawHeartbeat = true
			if !deleted {
				deleted = true
				if _, err := e.alice.DeleteSandbox(ctx, sb.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		if ev.Type == apiv1.EventExit {
			break
		}
	}
	if !sawHeartbeat || last.Type != apiv1.EventExit || last.Reason != "sandbox_deleted" {
		t.Errorf("heartbeat %v, last event %+v", sawHeartbeat, last)
	}
	// Reattaching after the sandbox is gone tells the same.
	s, err := e.alice.Events(ctx, sb.ID, cmd.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev, err := s.Next()
	if err != nil || ev.Type != apiv1.EventExit || ev.Reason != "sandbox_deleted" || ev.Seq == 0 {
		t.Errorf("reattach after delete: %+v %v", ev, err)
	}
	if _, err := s.Next(); err != io.EOF {
		t.Errorf("after exit: %v", err)
	}
}

func TestExec(t *testing.T) {
	e := newEnv(t, Config{ExecOutputBytes: 10})
	ctx := t.Context()
	sb := e.running(e.alice, nil)
	res, err := e.alice.Exec(ctx, sb.ID, apiv1.ExecRequest{
		CreateCommandRequest: apiv1.CreateCommandRequest{Shell: "cat; printf '\\377' >&2; exit 7"},
		StdinData:            "0123456789abcdef",
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == nil || *res.ExitCode != 7 || res.Stdout != "0123456789" || !res.StdoutTruncated ||
		res.StderrTruncated || string(res.StderrB64) != "\xff" {
		t.Errorf("exec: %+v", res)
	}
	ctx2, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := e.alice.GetCommand(ctx2, sb.ID, res.CommandID)
	if err != nil || c.State != apiv1.CommandExited {
		t.Errorf("exec's command: %+v %v", c, err)
	}
}
