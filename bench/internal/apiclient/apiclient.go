// Package apiclient is the HTTP API client the benches share: JSON calls
// with the bearer key, creates, lifecycle verbs and deletes awaiting their
// operations, a command round trip, and a spaced started on a temporary
// data dir.
package apiclient

import (
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
	"time"
)

// Client calls one server's API.
type Client struct {
	URL, Key string
	HTTP     *http.Client
}

// Do calls method path with in as JSON (nil: no body), wants status want
// and decodes the answer into out (nil: discarded).
func (c *Client) Do(ctx context.Context, method, path string, in, out any, want int) error {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Key)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// Create creates a sandbox from base and waits for its operation; it
// returns the sandbox id whenever one was made, so it can be deleted.
func (c *Client) Create(ctx context.Context, timeout time.Duration) (string, error) {
	return c.CreateFrom(ctx, map[string]any{"template": "base"}, timeout)
}

// CreateFrom is Create with the request body given.
func (c *Client) CreateFrom(ctx context.Context, body map[string]any, timeout time.Duration) (string, error) {
	id, op, err := c.StartCreate(ctx, body)
	if err != nil {
		return id, err
	}
	return id, c.Wait(ctx, op, timeout)
}

// StartCreate posts a create with body and returns its sandbox and
// operation ids without waiting for the operation.
func (c *Client) StartCreate(ctx context.Context, body map[string]any) (id, op string, err error) {
	var created struct {
		Sandbox   struct{ ID string }
		Operation struct{ ID string }
	}
	err = c.Do(ctx, "POST", "/v1/sandboxes", body, &created, 202)
	return created.Sandbox.ID, created.Operation.ID, err
}

// Wait long-polls operation op until it is done, for at most about
// timeout; an outcome other than succeeded is an error.
func (c *Client) Wait(ctx context.Context, op string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var o struct {
			Type, State string
			Error       *struct{ Code, Message string }
		}
		if err := c.Do(ctx, "GET", "/v1/operations/"+op+"?wait=30s", nil, &o, 200); err != nil {
			return err
		}
		switch o.State {
		case "succeeded":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("%s %s: %+v", o.Type, o.State, o.Error)
		}
	}
	return fmt.Errorf("operation %s not done after %s", op, timeout)
}

// Lifecycle posts verb (pause, suspend, wake, …) to sandbox id and waits
// for its operation.
func (c *Client) Lifecycle(ctx context.Context, id, verb string, timeout time.Duration) error {
	var resp struct{ Operation struct{ ID string } }
	if err := c.Do(ctx, "POST", "/v1/sandboxes/"+id+"/"+verb, nil, &resp, 202); err != nil {
		return err
	}
	return c.Wait(ctx, resp.Operation.ID, timeout)
}

// Delete deletes sandbox id and waits for its operation, for at most five
// minutes and also when the caller's context is done (it runs in
// deferred clean-ups).
func (c *Client) Delete(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var resp struct{ Operation struct{ ID string } }
	if err := c.Do(ctx, "DELETE", "/v1/sandboxes/"+id, nil, &resp, 202); err != nil {
		return err
	}
	return c.Wait(ctx, resp.Operation.ID, 5*time.Minute)
}

// ExecTrue runs argv `true` in sandbox id and wants exit 0.
func (c *Client) ExecTrue(ctx context.Context, id string) error {
	var res struct {
		ExitCode *int `json:"exit_code"`
	}
	if err := c.Do(ctx, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"true"}}, &res, 200); err != nil {
		return err
	}
	if res.ExitCode == nil || *res.ExitCode != 0 {
		return fmt.Errorf("true exited %v", res.ExitCode)
	}
	return nil
}

var listenRE = regexp.MustCompile(`msg="spaced serving" listen=(\S+)`)

// StartServer runs spaced on a temporary data dir with extra flags; stop
// ends it and unmounts and removes the data dir.
func StartServer(bin string, extra ...string) (stop func(), url, key string, err error) {
	stop, url, key, _, err = StartServerData(bin, extra...)
	return stop, url, key, err
}

// StartServerData is StartServer that also returns the server's data dir.
func StartServerData(bin string, extra ...string) (stop func(), url, key, data string, err error) {
	s, err := StartServerProc(bin, extra...)
	if err != nil {
		return nil, "", "", "", err
	}
	return s.Stop, s.URL, s.Key, s.Data, nil
}

// Server is a spaced StartServerProc started.
type Server struct {
	Stop           func() // ends it, unmounts and removes its data dir
	URL, Key, Data string
	PID            int
	Log            string // path of its log
}

// StartServerProc runs spaced on a temporary data dir with extra flags.
// The server gets SIGKILL if this process dies first; it has five minutes
// to start serving.
func StartServerProc(bin string, extra ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", "space-bench-api-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	logPath := filepath.Join(dir, "spaced.log")
	logf, err := os.Create(logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close() // the server has its own copy
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--data-dir", data, "--quota-sandboxes", "100"}, extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		exec.Command("umount", filepath.Join(data, "vol")).Run()
		os.RemoveAll(dir)
	}
	for range 3000 {
		b, _ := os.ReadFile(logPath)
		if m := listenRE.FindSubmatch(b); m != nil {
			k, err := os.ReadFile(filepath.Join(data, "admin.key"))
			if err != nil {
				stop()
				return nil, err
			}
			return &Server{Stop: stop, URL: "http://" + string(m[1]), Key: strings.TrimSpace(string(k)), Data: data,
				PID: cmd.Process.Pid, Log: logPath}, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := os.ReadFile(logPath)
	stop()
	return nil, fmt.Errorf("spaced did not start:\n%s", b)
}
