package cluster

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// TestTwelveIdleSandboxes: the suite's fleet is `make cluster`'s shape —
// three workers started with --vcpus 2 and spaced worker's default
// --vcpu-overcommit — and holds twelve idle 1-vCPU sandboxes at once
// (without overcommit it held six, and the seventh create waited out the
// schedule timeout). Every create succeeds and every sandbox answers.
func TestTwelveIdleSandboxes(t *testing.T) {
	if testing.Short() {
		t.Skip("boots twelve VMs")
	}
	r := replica(t, 0)
	const n = 12
	created := make([]apiv1.SandboxAndOperation, n)
	for i := range created {
		body := map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256}
		if code := r.do("POST", "/v1/sandboxes", body, &created[i]); code != http.StatusAccepted {
			t.Fatalf("create %d of %d: HTTP %d", i+1, n, code)
		}
		id := created[i].Sandbox.ID
		t.Cleanup(func() { r.deleteSandbox(id) })
	}
	// The creates run at once on the control plane; waiting for them in
	// turn keeps the test's Fatal on its own goroutine.
	ops := make([]apiv1.Operation, n)
	for i := range created {
		ops[i] = r.waitOperation(created[i].Operation.ID, operationLease+scheduleTimeout+8*time.Minute)
	}
	perWorker, running := map[string]int{}, 0
	for i, op := range ops {
		if op.State != "succeeded" {
			t.Errorf("create %d of %d: %s %s", i+1, n, op.State, errorOf(op))
			continue
		}
		sb := r.sandbox(created[i].Sandbox.ID)
		perWorker[sb.Worker]++
		running++
		if out := r.exec(sb.ID, "echo up"); out != "up\n" {
			t.Errorf("sandbox %s on %s: exec printed %q", sb.ID, sb.Worker, out)
		}
	}
	t.Logf("%d of %d idle 1-vCPU sandboxes running, per worker: %v", running, n, fmt.Sprint(perWorker))
}
