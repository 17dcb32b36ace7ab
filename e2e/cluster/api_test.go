package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// httpClient bounds every request (a wedged replica fails the case).
var httpClient = &http.Client{Timeout: 2 * time.Minute}

// api speaks the public API to one control replica with the admin key.
type api struct {
	t   *testing.T
	url string
	key string
}

// replica is a client of control replica i.
func replica(t *testing.T, i int) *api {
	t.Helper()
	urls := cl.ControlURLs()
	if len(urls) <= i {
		t.Fatalf("the cluster has %d control replicas, the case needs %d", len(urls), i+1)
	}
	b, err := os.ReadFile(cl.Info.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &api{t: t, url: urls[i], key: strings.TrimSpace(string(b))}
}

// do sends a JSON request and decodes a JSON answer into out (when not
// nil); it returns the status code, or 0 when the replica did not answer.
func (a *api) do(method, path string, body, out any) int {
	a.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			a.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.url+path, r)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			a.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// createSandbox asks for a sandbox of the base template and returns the
// 202's sandbox and operation.
func (a *api) createSandbox(vcpus, memoryMiB int) apiv1.SandboxAndOperation {
	a.t.Helper()
	var out apiv1.SandboxAndOperation
	body := map[string]any{"template": "base", "vcpus": vcpus, "memory_mib": memoryMiB}
	if code := a.do("POST", "/v1/sandboxes", body, &out); code != http.StatusAccepted {
		a.t.Fatalf("create sandbox: HTTP %d", code)
	}
	return out
}

// waitOperation long-polls the operation until it is done (bounded).
func (a *api) waitOperation(id string, within time.Duration) apiv1.Operation {
	a.t.Helper()
	deadline := time.Now().Add(within)
	for {
		var op apiv1.Operation
		code := a.do("GET", "/v1/operations/"+id+"?wait=20s", nil, &op)
		if code == http.StatusOK && op.DoneAt != nil {
			return op
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("operation %s not done after %v (HTTP %d, state %s, progress %v)", id, within, code, op.State, op.Progress)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sandbox reads one sandbox.
func (a *api) sandbox(id string) apiv1.Sandbox {
	a.t.Helper()
	var sb apiv1.Sandbox
	if code := a.do("GET", "/v1/sandboxes/"+id, nil, &sb); code != http.StatusOK {
		a.t.Fatalf("GET sandbox %s: HTTP %d", id, code)
	}
	return sb
}

// deleteSandbox deletes a sandbox and waits for the delete to finish.
func (a *api) deleteSandbox(id string) {
	a.t.Helper()
	var out apiv1.OperationResponse
	switch code := a.do("DELETE", "/v1/sandboxes/"+id, nil, &out); code {
	case http.StatusAccepted:
		if op := a.waitOperation(out.Operation.ID, 3*time.Minute); op.State != "succeeded" {
			a.t.Errorf("delete %s: %s %v", id, op.State, op.Error)
		}
	case http.StatusNotFound, http.StatusConflict: // gone, or deleting already
	default:
		a.t.Errorf("delete %s: HTTP %d", id, code)
	}
}

func errorOf(op apiv1.Operation) string {
	if op.Error == nil {
		return ""
	}
	return fmt.Sprintf("%s: %s", op.Error.Code, op.Error.Message)
}
