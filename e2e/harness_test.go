// Package e2e drives a real spaced process over HTTP only: it builds the
// binaries, starts spaced on a fresh data dir, boots real sandboxes, and
// checks the public contract of docs/api.md end to end, including crash recovery.
// It also runs the Python walkthrough and the CLI against the server.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/testenv"
)

var binDir string // spaced, space-agent, space and hostileguest, built once in TestMain

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "space-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binDir = dir
		root, err := filepath.Abs("..")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, b := range []struct{ out, pkg, cgo, tags string }{
			{"spaced", "./cmd/spaced", "1", ""}, {"space", "./cmd/space", "1", ""}, {"space-agent", "./cmd/space-agent", "0", ""},
			// spaced that can be told to SIGKILL itself at a named step (faults_test.go).
			{"spaced-faultinject", "./cmd/spaced", "1", "faultinject"},
			// The attacker hostile_host_test.go uploads into sandboxes.
			{"hostileguest", "./e2e/hostileguest", "0", ""},
		} {
			cmd := exec.Command("go", "build", "-trimpath", "-tags="+b.tags, "-o", filepath.Join(dir, b.out), b.pkg)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
			if out, err := cmd.CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "build %s: %v\n%s", b.pkg, err, out)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// server is one spaced process on its own data dir.
type server struct {
	t        *testing.T
	dataDir  string
	args     []string
	binary   string   // "spaced" unless set before start
	env      []string // added to spaced's environment
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has exited
	log      *os.File
	URL      string
	AdminKey string
}

var listenRE = regexp.MustCompile(`msg="spaced serving" listen=(\S+)`)

// startServer starts spaced on a fresh data dir; cleanup stops it, deletes
// what is left, unmounts the data volume and checks that nothing leaked.
func startServer(t *testing.T, extraArgs ...string) *server {
	t.Helper()
	s := newServer(t, extraArgs...)
	s.start()
	return s
}

// newServer is startServer without the start, for a caller that sets the
// binary or environment first.
func newServer(t *testing.T, extraArgs ...string) *server {
	t.Helper()
	testenv.RequireVM(t)
	s := &server{t: t, dataDir: filepath.Join(t.TempDir(), "data"), args: extraArgs}
	t.Cleanup(func() { testenv.CheckNoLeaks(t, s.dataDir) })
	t.Cleanup(s.teardown)
	return s
}

func (s *server) start() {
	t := s.t
	t.Helper()
	logPath := filepath.Join(filepath.Dir(s.dataDir), fmt.Sprintf("spaced-%d.log", time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	s.log = f
	args := append([]string{"--listen", "127.0.0.1:0", "--data-dir", s.dataDir, "--accel", "auto"}, s.args...)
	bin := s.binary
	if bin == "" {
		bin = "spaced"
	}
	s.cmd = exec.Command(filepath.Join(binDir, bin), args...)
	s.cmd.Env = append(os.Environ(), s.env...)
	s.cmd.Stdout, s.cmd.Stderr = f, f
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	s.exited = exited
	go func() { s.cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, _ := os.ReadFile(logPath)
		if m := listenRE.FindSubmatch(b); m != nil {
			s.URL = "http://" + string(m[1])
			break
		}
		select {
		case <-exited:
			t.Fatalf("spaced exited at start-up:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("spaced did not start:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	key, err := os.ReadFile(filepath.Join(s.dataDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	s.AdminKey = strings.TrimSpace(string(key))
}

// kill SIGKILLs spaced (its VMs keep running, as after a crash).
func (s *server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGKILL)
		waitExit(s.cmd.Process.Pid)
	}
	s.cmd = nil
}

// stop ends spaced with SIGTERM.
func (s *server) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		waitExit(s.cmd.Process.Pid)
	}
	s.cmd = nil
}

// running reports whether the current spaced still runs.
func (s *server) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

func waitExit(pid int) {
	for i := 0; i < 300; i++ {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// teardown deletes every sandbox still live, stops spaced, kills by PID
// any VMM of the data dir left (a failure: deleting must have stopped it,
// or a test left its spaced dead) and unmounts the volume. It cannot be
// stopped half way: nothing in it fails the test fatally, so a dead or
// wedged server still has its VMMs killed and its volume unmounted.
func (s *server) teardown() {
	t := s.t
	if s.running() {
		c := s.client(s.AdminKey)
		var list apiv1.SandboxList
		if st, err := c.try("GET", "/v1/sandboxes?page_size=1000", &list); err == nil && st == 200 {
			for _, sb := range list.Sandboxes {
				if sb.State != "deleted" && sb.State != "failed" && sb.State != "deleting" {
					c.try("DELETE", "/v1/sandboxes/"+sb.ID, nil)
				}
			}
		}
		s.stop()
	}
	s.cmd = nil
	if pids := killVMMs(s.dataDir); len(pids) > 0 {
		t.Errorf("VMMs %v still running after their server stopped; killed them", pids)
	}
	vol := filepath.Join(s.dataDir, "vol")
	if err := exec.Command("umount", vol).Run(); err != nil {
		t.Logf("umount %s: %v", vol, err)
	}
	if t.Failed() && s.log != nil {
		t.Logf("spaced log (tail):\n%s", s.logTail(20000))
	}
}

// logTail is the last n bytes of the current spaced's log.
func (s *server) logTail(n int) []byte {
	b, _ := os.ReadFile(s.log.Name())
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return b
}

// vmmPIDs lists QEMU processes whose command line names dir.
func vmmPIDs(dir string) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(dir)) || !bytes.Contains(b, []byte("qemu-system")) {
			continue
		}
		var pid int
		fmt.Sscanf(strings.TrimPrefix(p, "/proc/"), "%d", &pid)
		pids = append(pids, pid)
	}
	return pids
}

// httpClient bounds every request a test makes (a wedged server must fail
// the test, not hang the run); event streams bound themselves too.
var httpClient = &http.Client{Timeout: 3 * time.Minute}

// client speaks HTTP to the server with one API key.
type client struct {
	t   *testing.T
	url string
	key string
}

func (s *server) client(key string) *client { return &client{t: s.t, url: s.URL, key: key} }

// request sends a request and returns the response (caller closes the body).
func (c *client) request(method, path string, body io.Reader, hdr map[string]string) *http.Response {
	c.t.Helper()
	resp, err := c.send(method, path, body, hdr)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// try is do for teardown: a server that does not answer is an error
// returned, not the end of the test, and the answer is decoded when it can be.
func (c *client) try(method, path string, out any) (int, error) {
	resp, err := c.send(method, path, nil, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && out != nil && len(b) > 0 {
		err = json.Unmarshal(b, out)
	}
	return resp.StatusCode, err
}

// send sends one request with the client's key.
func (c *client) send(method, path string, body io.Reader, hdr map[string]string) (*http.Response, error) {
	req, err := http.NewRequest(method, c.url+path, body)
	if err != nil {
		return nil, err
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return httpClient.Do(req)
}

// do sends JSON in (nil for none), decodes JSON out (nil to discard) and
// returns the status.
func (c *client) do(method, path string, in, out any) int {
	c.t.Helper()
	status, _ := c.doHeaders(method, path, in, out, nil)
	return status
}

func (c *client) doHeaders(method, path string, in, out any, hdr map[string]string) (int, http.Header) {
	c.t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			c.t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	resp := c.request(method, path, body, hdr)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: status %d, decode %q: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode, resp.Header
}

// mustDo is do that fails the test unless the status is want.
func (c *client) mustDo(method, path string, in, out any, want int) {
	c.t.Helper()
	var raw json.RawMessage
	status := c.do(method, path, in, &raw)
	if status != want {
		c.t.Fatalf("%s %s = %d %s, want %d", method, path, status, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatal(err)
		}
	}
}

// waitOp long-polls an operation until it is done.
func (c *client) waitOp(id string) apiv1.Operation {
	c.t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		var op apiv1.Operation
		c.mustDo("GET", "/v1/operations/"+id+"?wait=30s", nil, &op, 200)
		switch op.State {
		case "succeeded", "failed", "cancelled":
			return op
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("operation %s still %s", id, op.State)
		}
	}
}

// createSandbox creates a sandbox and waits until it runs.
func (c *client) createSandbox(req map[string]any) apiv1.Sandbox {
	c.t.Helper()
	if req == nil {
		req = map[string]any{}
	}
	if _, ok := req["template"]; !ok {
		req["template"] = "base"
	}
	var created apiv1.SandboxAndOperation
	c.mustDo("POST", "/v1/sandboxes", req, &created, 202)
	if op := c.waitOp(created.Operation.ID); op.State != "succeeded" {
		c.t.Fatalf("create operation ended %s: %+v", op.State, op.Error)
	}
	var sb apiv1.Sandbox
	c.mustDo("GET", "/v1/sandboxes/"+created.Sandbox.ID, nil, &sb, 200)
	if sb.State != "running" {
		c.t.Fatalf("sandbox %s is %s after create", sb.ID, sb.State)
	}
	return sb
}

// deleteSandbox deletes a sandbox and waits for the operation.
func (c *client) deleteSandbox(id string) {
	c.t.Helper()
	var resp apiv1.OperationResponse
	c.mustDo("DELETE", "/v1/sandboxes/"+id, nil, &resp, 202)
	if op := c.waitOp(resp.Operation.ID); op.State != "succeeded" {
		c.t.Fatalf("delete operation ended %s: %+v", op.State, op.Error)
	}
}

// events reads a command's NDJSON event stream to its end.
func (c *client) events(sbx, cmd string, after uint64) []apiv1.Event {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/sandboxes/%s/commands/%s/events?after=%d", c.url, sbx, cmd, after), nil)
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("events: %d %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-ndjson") {
		c.t.Errorf("events Content-Type = %q", ct)
	}
	var evs []apiv1.Event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		var ev apiv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			c.t.Fatalf("event line %q: %v", sc.Text(), err)
		}
		if ev.Type == "heartbeat" {
			continue
		}
		evs = append(evs, ev)
	}
	return evs
}

// stdoutOf joins the stdout bytes of events ("data" or "data_b64").
func stdoutOf(evs []apiv1.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type != "stdout" {
			continue
		}
		if ev.Data != nil {
			b.WriteString(*ev.Data)
		}
		b.Write(ev.DataB64)
	}
	return b.String()
}

func lastEvent(t *testing.T, evs []apiv1.Event) apiv1.Event {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	return evs[len(evs)-1]
}
