package main

import (
	"bytes"
	"encoding/json"
	"errors"
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

// client speaks the public API with one key.
type client struct {
	url, key string
	http     *http.Client
}

func newClient(url, key string) *client {
	return &client{url: url, key: strings.TrimSpace(key), http: &http.Client{Timeout: 2 * time.Minute}}
}

func (c *client) do(method, path string, body, out any) (int, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.url+path, r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		return resp.StatusCode, json.Unmarshal(b, out)
	}
	return resp.StatusCode, nil
}

func (c *client) create() (id, op string, err error) {
	var out struct {
		Sandbox   struct{ ID string } `json:"sandbox"`
		Operation struct{ ID string } `json:"operation"`
	}
	_, err = c.do("POST", "/v1/sandboxes", map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256}, &out)
	return out.Sandbox.ID, out.Operation.ID, err
}

// wait long-polls an operation until it is done; an outcome other than
// succeeded is an error.
func (c *client) wait(op string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		var o struct {
			State  string     `json:"state"`
			DoneAt *time.Time `json:"done_at"`
			Error  *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if _, err := c.do("GET", "/v1/operations/"+op+"?wait=20s", nil, &o); err != nil {
			return err
		}
		if o.DoneAt != nil {
			if o.State != "succeeded" {
				return fmt.Errorf("operation %s %s: %+v", op, o.State, o.Error)
			}
			return nil
		}
	}
	return fmt.Errorf("operation %s not done after %v", op, within)
}

func (c *client) delete(id string) error {
	var out struct {
		Operation struct{ ID string } `json:"operation"`
	}
	if _, err := c.do("DELETE", "/v1/sandboxes/"+id, nil, &out); err != nil {
		return err
	}
	return c.wait(out.Operation.ID, 5*time.Minute)
}

// createOne times one create (API call to operation succeeded), then
// deletes the sandbox (not timed).
func (c *client) createOne() (time.Duration, error) {
	start := time.Now()
	id, op, err := c.create()
	if err != nil {
		return 0, err
	}
	if err := c.wait(op, 10*time.Minute); err != nil {
		return 0, err
	}
	d := time.Since(start)
	return d, c.delete(id)
}

// singleNode is a `spaced` with its worker in process on a temp data dir.
type singleNode struct {
	*client
	cmd *exec.Cmd
	dir string
}

var listenRE = regexp.MustCompile(`msg="spaced serving" listen=(\S+)`)

func startSingle(bin string, extra ...string) (*singleNode, error) {
	dir, err := os.MkdirTemp("", "space-bench-cluster-single-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	logPath := filepath.Join(dir, "spaced.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--data-dir", data, "--quota-sandboxes", "100"}, extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &singleNode{cmd: cmd, dir: dir}
	for range 3000 {
		b, _ := os.ReadFile(logPath)
		if m := listenRE.FindSubmatch(b); m != nil {
			k, err := os.ReadFile(filepath.Join(data, "admin.key"))
			if err != nil {
				s.stop()
				return nil, err
			}
			s.client = newClient("http://"+string(m[1]), string(k))
			return s, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.stop()
	return nil, errors.New("single-node spaced did not start; log " + logPath)
}

// stop ends spaced (its sandboxes were deleted by the runs), unmounts its
// volume and removes its dir.
func (s *singleNode) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
	_ = exec.Command("umount", filepath.Join(s.dir, "data", "vol")).Run()
	_ = os.RemoveAll(s.dir)
}
