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

// atStart is what a create sent the moment devcluster.Start returned (by
// TestMain, before anything else ran) got: the answer to the POST and the
// end of its operation.
var atStart struct {
	code int
	body string
	op   apiv1.Operation
	err  error
}

// createAtStart creates a base sandbox through the first replica right
// after Start returned, once, with no retry: Start returning means such a
// create succeeds. It waits for the operation and deletes the sandbox, so
// the cases find the fleet empty.
func createAtStart() {
	urls := cl.ControlURLs()
	if len(urls) == 0 {
		atStart.err = fmt.Errorf("no control replicas")
		return
	}
	b, err := os.ReadFile(cl.Info.AdminKeyFile)
	if err != nil {
		atStart.err = err
		return
	}
	key := strings.TrimSpace(string(b))
	call := func(method, path string, body any) (int, []byte, error) {
		var r io.Reader
		if body != nil {
			j, _ := json.Marshal(body)
			r = bytes.NewReader(j)
		}
		req, err := http.NewRequest(method, urls[0]+path, r)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, out, err
	}
	code, body, err := call("POST", "/v1/sandboxes", map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256})
	atStart.code, atStart.body, atStart.err = code, string(body), err
	if err != nil || code != http.StatusAccepted {
		return
	}
	var created apiv1.SandboxAndOperation
	if atStart.err = json.Unmarshal(body, &created); atStart.err != nil {
		return
	}
	deadline := time.Now().Add(operationLease + scheduleTimeout + 3*time.Minute)
	for atStart.op.DoneAt == nil && time.Now().Before(deadline) {
		code, b, err := call("GET", "/v1/operations/"+created.Operation.ID+"?wait=20s", nil)
		if err == nil && code == http.StatusOK {
			_ = json.Unmarshal(b, &atStart.op)
		}
	}
	if _, _, err := call("DELETE", "/v1/sandboxes/"+created.Sandbox.ID, nil); err != nil {
		atStart.err = err
	}
}

// TestCreateRightAfterStart: the create TestMain sent as soon as the
// launcher `make cluster` runs returned was accepted (the base template
// was published and recorded, a worker could take it) and succeeded.
func TestCreateRightAfterStart(t *testing.T) {
	if atStart.err != nil {
		t.Fatalf("create right after start: %v", atStart.err)
	}
	if atStart.code != http.StatusAccepted {
		t.Fatalf("create right after start: HTTP %d: %s", atStart.code, atStart.body)
	}
	if atStart.op.State != "succeeded" {
		t.Fatalf("create right after start: operation %s %s", atStart.op.State, errorOf(atStart.op))
	}
}
