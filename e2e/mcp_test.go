package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpTools are the tools `space mcp` must offer, exactly.
var mcpTools = []string{
	"branch_sandbox", "checkpoint_sandbox", "create_sandbox", "delete_sandbox", "get_preview_url", "list_files",
	"list_ports", "list_sandboxes", "pause_sandbox", "read_command_output", "read_file", "restore_sandbox", "run_command", "start_command",
	"suspend_sandbox", "wake_sandbox", "write_file",
}

// TestMCP drives `space mcp` against a real spaced with the Go SDK's client
// (stdio and streamable HTTP) and the TypeScript SDK's client
// (e2e/mcp-client), and checks that stdout carries nothing but protocol.
func TestMCP(t *testing.T) {
	// Two live sandboxes a tenant: the scenario needs two at once (a
	// sandbox and its branch); the HTTP test runs into the limit.
	srv := startServer(t, "--quota-sandboxes", "2")
	key := newTenantKey(t, srv, "mcp-go")
	t.Run("go-sdk stdio", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.Command(filepath.Join(binDir, "space"), "mcp")
		cmd.Env = append(os.Environ(), "SPACE_URL="+srv.URL, "SPACE_API_KEY="+key)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		client := mcp.NewClient(&mcp.Implementation{Name: "space-e2e", Version: "1"}, nil)
		cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
		if err != nil {
			t.Fatalf("connect: %v (stderr: %s)", err, stderr.String())
		}
		defer cs.Close()
		mcpScenario(ctx, t, cs)
	})
	t.Run("go-sdk http", func(t *testing.T) { testMCPHTTP(t, srv, key) })
	t.Run("stdout is only protocol", func(t *testing.T) { testMCPStdoutClean(t, srv) })
	t.Run("typescript sdk", func(t *testing.T) { testMCPTypeScript(t, srv, newTenantKey(t, srv, "mcp-ts")) })
}

// call calls a tool and decodes its structured result into out; it fails the
// test on a protocol error and returns the result.
func call(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	if out != nil && !res.IsError {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return res
}

// mustCall is call that fails the test when the tool reports an error.
func mustCall(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	if res := call(ctx, t, cs, name, args, out); res.IsError {
		t.Fatalf("%s(%v) failed: %s", name, args, resultText(res))
	}
}

// wantToolError calls a tool that must fail with isError and a message
// containing want.
func wantToolError(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, want string) {
	t.Helper()
	res := call(ctx, t, cs, name, args, nil)
	if !res.IsError {
		t.Errorf("%s(%v) succeeded, want an error containing %q", name, args, want)
		return
	}
	if txt := resultText(res); !strings.Contains(txt, want) {
		t.Errorf("%s(%v) error %q, want it to contain %q", name, args, txt, want)
	}
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

type mcpSandbox struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

type mcpRun struct {
	ExitCode       *int   `json:"exit_code"`
	Reason         string `json:"reason"`
	Stdout         string `json:"stdout"`
	Stderr         string `json:"stderr"`
	StdoutCutBytes int64  `json:"stdout_cut_bytes"`
}

// mcpScenario is the common walk: tools, create, run, files, a long
// command, lifecycle, checkpoint and branch, errors, delete.
func mcpScenario(ctx context.Context, t *testing.T, cs *mcp.ClientSession) {
	if ir := cs.InitializeResult(); ir == nil || ir.ServerInfo == nil || ir.ServerInfo.Name != "space" {
		t.Fatalf("initialize result: %+v", ir)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byName := map[string]*mcp.Tool{}
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		byName[tl.Name] = tl
		if tl.Description == "" || tl.Annotations == nil || tl.OutputSchema == nil {
			t.Errorf("tool %s lacks a description, annotations or an output schema", tl.Name)
		}
		if m, _ := tl.InputSchema.(map[string]any); m["type"] != "object" {
			t.Errorf("tool %s input schema %v", tl.Name, tl.InputSchema)
		}
	}
	sort.Strings(names)
	if strings.Join(names, ",") != strings.Join(mcpTools, ",") {
		t.Fatalf("tools = %v, want %v", names, mcpTools)
	}
	if a := byName["delete_sandbox"].Annotations; a.DestructiveHint == nil || !*a.DestructiveHint {
		t.Errorf("delete_sandbox annotations %+v: want destructiveHint", a)
	}
	if a := byName["list_sandboxes"].Annotations; !a.ReadOnlyHint {
		t.Errorf("list_sandboxes annotations %+v: want readOnlyHint", a)
	}
	props := byName["run_command"].InputSchema.(map[string]any)["properties"].(map[string]any)
	for _, p := range []string{"sandbox_id", "command", "argv", "cwd", "env", "timeout_seconds"} {
		if _, ok := props[p]; !ok {
			t.Errorf("run_command has no argument %s", p)
		}
	}

	var sb mcpSandbox
	mustCall(ctx, t, cs, "create_sandbox", map[string]any{"template": "base", "timeout_seconds": 1800}, &sb)
	if !strings.HasPrefix(sb.ID, "sbx_") || sb.State != "running" {
		t.Fatalf("create_sandbox = %+v", sb)
	}
	deleted := false
	defer func() {
		if !deleted {
			cs.CallTool(context.WithoutCancel(ctx), &mcp.CallToolParams{Name: "delete_sandbox", Arguments: map[string]any{"sandbox_id": sb.ID}})
		}
	}()
	var list struct{ Sandboxes []mcpSandbox }
	mustCall(ctx, t, cs, "list_sandboxes", map[string]any{}, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != sb.ID {
		t.Errorf("list_sandboxes = %+v, want just %s", list.Sandboxes, sb.ID)
	}

	var run mcpRun
	mustCall(ctx, t, cs, "run_command", map[string]any{"sandbox_id": sb.ID, "command": "echo hi $WHO; echo oops >&2; exit 3",
		"env": map[string]any{"WHO": "there"}}, &run)
	if run.ExitCode == nil || *run.ExitCode != 3 || run.Stdout != "hi there\n" || run.Stderr != "oops\n" || run.Reason != "exited" {
		t.Errorf("run_command = %+v", run)
	}
	mustCall(ctx, t, cs, "run_command", map[string]any{"sandbox_id": sb.ID, "argv": []string{"pwd"}, "cwd": "/tmp"}, &run)
	if run.Stdout != "/tmp\n" || *run.ExitCode != 0 {
		t.Errorf("run_command argv = %+v", run)
	}
	// 200000 bytes of output: the default cap keeps 65536 and marks the cut.
	mustCall(ctx, t, cs, "run_command", map[string]any{"sandbox_id": sb.ID, "command": "head -c 200000 /dev/zero | tr '\\000' a"}, &run)
	if run.StdoutCutBytes != 200000-65536 || !strings.Contains(run.Stdout, fmt.Sprintf("[… %d bytes cut …]", 200000-65536)) ||
		strings.Count(run.Stdout, "a") != 65536 {
		t.Errorf("capped run_command: cut %d, %d bytes of stdout", run.StdoutCutBytes, len(run.Stdout))
	}

	var wrote struct {
		Size int64  `json:"size"`
		Mode string `json:"mode"`
	}
	mustCall(ctx, t, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "/root/mcp/hello.txt", "content": "héllo\n"}, &wrote)
	if wrote.Size != int64(len("héllo\n")) {
		t.Errorf("write_file = %+v", wrote)
	}
	bin := []byte{0xff, 0x00, 0xfe, 'x'}
	mustCall(ctx, t, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "/root/mcp/bin",
		"content_base64": base64.StdEncoding.EncodeToString(bin)}, nil)
	var read struct {
		Content       string `json:"content"`
		ContentBase64 string `json:"content_base64"`
		Size          int64  `json:"size"`
	}
	mustCall(ctx, t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/root/mcp/hello.txt"}, &read)
	if read.Content != "héllo\n" || read.ContentBase64 != "" {
		t.Errorf("read_file text = %+v", read)
	}
	read.Content = ""
	mustCall(ctx, t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/root/mcp/bin"}, &read)
	if got, _ := base64.StdEncoding.DecodeString(read.ContentBase64); !bytes.Equal(got, bin) || read.Content != "" {
		t.Errorf("read_file binary = %+v", read)
	}
	var files struct {
		Entries []struct{ Name, Type string }
	}
	mustCall(ctx, t, cs, "list_files", map[string]any{"sandbox_id": sb.ID, "path": "/root/mcp"}, &files)
	if len(files.Entries) != 2 || files.Entries[0].Name != "bin" || files.Entries[1].Name != "hello.txt" {
		t.Errorf("list_files = %+v", files)
	}

	// Long-running work: start, then read until it exits.
	var started struct {
		CommandID string `json:"command_id"`
		PID       int    `json:"pid"`
	}
	mustCall(ctx, t, cs, "start_command", map[string]any{"sandbox_id": sb.ID, "command": "for i in 1 2 3; do echo n$i; sleep 1; done; exit 4"}, &started)
	if !strings.HasPrefix(started.CommandID, "cmd_") {
		t.Fatalf("start_command = %+v", started)
	}
	var out strings.Builder
	var after uint64
	for i := 0; ; i++ {
		var rd struct {
			Stdout    string `json:"stdout"`
			NextAfter uint64 `json:"next_after"`
			Exited    bool   `json:"exited"`
			ExitCode  *int   `json:"exit_code"`
		}
		mustCall(ctx, t, cs, "read_command_output", map[string]any{"sandbox_id": sb.ID, "command_id": started.CommandID, "after": after}, &rd)
		out.WriteString(rd.Stdout)
		after = rd.NextAfter
		if rd.Exited {
			if rd.ExitCode == nil || *rd.ExitCode != 4 {
				t.Errorf("read_command_output exit = %v", rd.ExitCode)
			}
			break
		}
		if i > 60 {
			t.Fatal("the started command never exited")
		}
	}
	if out.String() != "n1\nn2\nn3\n" {
		t.Errorf("read_command_output gathered %q", out.String())
	}

	// Lifecycle and errors that are tool results, not protocol errors.
	var lc struct{ State string }
	mustCall(ctx, t, cs, "pause_sandbox", map[string]any{"sandbox_id": sb.ID}, &lc)
	if lc.State != "paused" {
		t.Errorf("pause_sandbox state %q", lc.State)
	}
	wantToolError(ctx, t, cs, "run_command", map[string]any{"sandbox_id": sb.ID, "command": "true"}, "conflict")
	mustCall(ctx, t, cs, "wake_sandbox", map[string]any{"sandbox_id": sb.ID}, &lc)
	if lc.State != "running" {
		t.Errorf("wake_sandbox state %q", lc.State)
	}
	wantToolError(ctx, t, cs, "run_command", map[string]any{"sandbox_id": "sbx_nosuch", "command": "true"}, "not_found")
	wantToolError(ctx, t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "relative.txt"}, "absolute")
	wantToolError(ctx, t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/no/such"}, "not_found")
	wantToolError(ctx, t, cs, "run_command", map[string]any{"sandbox_id": sb.ID, "command": "true", "argv": []string{"true"}}, "exactly one")
	wantToolError(ctx, t, cs, "create_sandbox", map[string]any{"template": "no-such-template"}, "template")
	wantToolError(ctx, t, cs, "restore_sandbox", map[string]any{"sandbox_id": sb.ID, "checkpoint_id": "ckpt_nosuch"}, "not_found")

	var ck struct {
		CheckpointID string `json:"checkpoint_id"`
	}
	mustCall(ctx, t, cs, "checkpoint_sandbox", map[string]any{"sandbox_id": sb.ID, "name": "mcp"}, &ck)
	if !strings.HasPrefix(ck.CheckpointID, "ckpt_") {
		t.Fatalf("checkpoint_sandbox = %+v", ck)
	}
	mustCall(ctx, t, cs, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "/root/mcp/hello.txt", "content": "changed"}, nil)
	var br mcpSandbox
	mustCall(ctx, t, cs, "branch_sandbox", map[string]any{"checkpoint_id": ck.CheckpointID}, &br)
	if br.ID == sb.ID || br.State != "running" {
		t.Errorf("branch_sandbox = %+v", br)
	}
	mustCall(ctx, t, cs, "read_file", map[string]any{"sandbox_id": br.ID, "path": "/root/mcp/hello.txt"}, &read)
	if read.Content != "héllo\n" {
		t.Errorf("the branch reads %q, want the checkpoint's content", read.Content)
	}
	mustCall(ctx, t, cs, "delete_sandbox", map[string]any{"sandbox_id": br.ID}, nil)
	mustCall(ctx, t, cs, "restore_sandbox", map[string]any{"sandbox_id": sb.ID, "checkpoint_id": ck.CheckpointID}, &lc)
	mustCall(ctx, t, cs, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "/root/mcp/hello.txt"}, &read)
	if read.Content != "héllo\n" {
		t.Errorf("after restore_sandbox the file reads %q", read.Content)
	}

	var del struct{ Deleted bool }
	mustCall(ctx, t, cs, "delete_sandbox", map[string]any{"sandbox_id": sb.ID}, &del)
	deleted = del.Deleted
	mustCall(ctx, t, cs, "list_sandboxes", map[string]any{}, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("list_sandboxes after delete = %+v", list.Sandboxes)
	}
	wantToolError(ctx, t, cs, "run_command", map[string]any{"sandbox_id": sb.ID, "command": "true"}, "conflict")
}

// startMCPHTTP starts `space mcp --http` on a free port and returns its URL.
func startMCPHTTP(t *testing.T, srv *server) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "space"), "mcp", "--http", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "SPACE_URL="+srv.URL, "SPACE_API_KEY=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`on (http://\S+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
	}()
	select {
	case u := <-urlc:
		return u
	case <-time.After(time.Minute):
		t.Fatal("space mcp --http did not say where it serves")
	}
	return ""
}

type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// testMCPHTTP runs the scenario over streamable HTTP and checks that a
// caller without a valid key is refused and that callers are tenants.
func testMCPHTTP(t *testing.T, srv *server, key string) {
	u := startMCPHTTP(t, srv)
	hc := &http.Client{Timeout: 30 * time.Second}
	for _, k := range []string{"", "space_bogus"} {
		req, _ := http.NewRequest("POST", u, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if k != "" {
			req.Header.Set("Authorization", "Bearer "+k)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("key %q: status %d, want 401", k, resp.StatusCode)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	connect := func(key string) *mcp.ClientSession {
		client := mcp.NewClient(&mcp.Implementation{Name: "space-e2e-http", Version: "1"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: u,
			HTTPClient: &http.Client{Transport: bearer{key}}, DisableStandaloneSSE: true}, nil)
		if err != nil {
			t.Fatalf("connect over HTTP: %v", err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	cs := connect(key)
	// Another tenant's caller sees none of this caller's sandboxes.
	other := connect(newTenantKey(t, srv, "mcp-http-other"))
	var mine, mine2 mcpSandbox
	mustCall(ctx, t, other, "create_sandbox", map[string]any{}, &mine)
	mustCall(ctx, t, other, "create_sandbox", map[string]any{"memory_mib": 256, "vcpus": 1}, &mine2)
	wantToolError(ctx, t, other, "create_sandbox", map[string]any{}, "resource_exhausted")
	mustCall(ctx, t, other, "delete_sandbox", map[string]any{"sandbox_id": mine2.ID}, nil)
	var list struct{ Sandboxes []mcpSandbox }
	mustCall(ctx, t, cs, "list_sandboxes", map[string]any{}, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("a caller sees another tenant's sandboxes: %+v", list.Sandboxes)
	}
	wantToolError(ctx, t, cs, "read_file", map[string]any{"sandbox_id": mine.ID, "path": "/etc/hostname"}, "not_found")
	mustCall(ctx, t, other, "delete_sandbox", map[string]any{"sandbox_id": mine.ID}, nil)
	mcpScenario(ctx, t, cs)
}

// testMCPStdoutClean speaks raw JSON-RPC to `space mcp` with a key the
// server refuses: every stdout line is a JSON-RPC message, and the failure is
// a tool result with isError and the API's message.
func testMCPStdoutClean(t *testing.T, srv *server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "space"), "mcp")
	cmd.Env = append(os.Environ(), "SPACE_URL="+srv.URL, "SPACE_API_KEY=space_bogus")
	cmd.WaitDelay = 10 * time.Second
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	send := func(s string) { io.WriteString(stdin, s+"\n") }
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_sandboxes","arguments":{}}}`)
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	answers := map[float64]map[string]any{}
	for len(answers) < 3 && sc.Scan() {
		var msg map[string]any
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil || msg["jsonrpc"] != "2.0" {
			t.Errorf("stdout line is not JSON-RPC: %q", sc.Text())
			continue
		}
		if id, ok := msg["id"].(float64); ok {
			answers[id] = msg
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("space mcp exited with %v after stdin closed (stderr: %s)", err, stderr.String())
	}
	res, _ := answers[2]["result"].(map[string]any)
	if res == nil || res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "unauthenticated") {
		t.Errorf("list_sandboxes with a bad key answered %v, want an isError result naming unauthenticated", answers[2])
	}
	if answers[3]["error"] == nil {
		t.Errorf("an unknown tool answered %v, want a JSON-RPC error", answers[3])
	}
}

// testMCPTypeScript runs e2e/mcp-client/client.mjs, which drives `space mcp`
// with the official TypeScript SDK's client over stdio and HTTP.
func testMCPTypeScript(t *testing.T, srv *server, key string) {
	node := nodeBinary(t)
	dir, err := filepath.Abs("mcp-client")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the TypeScript SDK is not installed: run make setup-test (npm ci in e2e/mcp-client): %v", err)
	}
	httpURL := startMCPHTTP(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SPACE_URL="+srv.URL, "SPACE_API_KEY="+key,
		"SPACE_BIN="+filepath.Join(binDir, "space"), "SPACE_MCP_HTTP_URL="+httpURL)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("node client.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the TypeScript client failed: %v", err)
	}
	if !strings.Contains(string(out), "ok: all checks passed") {
		t.Fatal("the TypeScript client did not finish its checks")
	}
}
