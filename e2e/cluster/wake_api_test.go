package cluster

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/testenv"
)

// Suspend and wake through the public API across workers: suspended
// through replica 1, the sandbox has no worker and no Pod; with its old
// node cordoned, the wake through replica 2 lands on another worker, which
// streams the snapshot from object storage, and the sandbox's file and
// running process are there, the counter going on from where it stopped.
func TestSuspendWakeThroughAPI(t *testing.T) {
	r1, r2 := replica(t, 0), replica(t, 1)
	sb := r1.create(map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256})
	r1.exec(sb.ID, "echo kept > /root/kept")
	r1.startCommand(sb.ID, "i=0; while true; do i=$((i+1)); echo $i > /tmp/n; sleep 0.1; done")
	testenv.Eventually(t, time.Minute, func() error { _, err := r1.counter(sb.ID); return err })

	beforeSuspend, err := r1.counter(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	lifecycle(t, r1, sb.ID, "suspend")
	if out, err := r1.tryExec(sb.ID, "true"); err == nil {
		t.Fatalf("exec in a suspended sandbox answered %q", out)
	}
	if got := r2.sandbox(sb.ID); got.State != "suspended" || got.Worker != "" {
		t.Fatalf("after suspend: state %s worker %q, want suspended with no worker", got.State, got.Worker)
	}
	waitNoPod(t, sb.ID)

	cordon(t, sb.Worker)
	lifecycle(t, r2, sb.ID, "wake")
	woke := r2.sandbox(sb.ID)
	if woke.State != "running" || woke.Worker == "" || woke.Worker == sb.Worker {
		t.Fatalf("after wake: state %s on %q (was on %s, now cordoned), want running on another worker", woke.State, woke.Worker, sb.Worker)
	}
	if out := r2.exec(sb.ID, "cat /root/kept"); out != "kept\n" {
		t.Fatalf("woken on %s, the file reads %q", woke.Worker, out)
	}
	first, err := r2.counter(sb.ID)
	if err != nil {
		t.Fatalf("the counter after wake: %v", err)
	}
	if first < beforeSuspend {
		t.Fatalf("counter %d after the wake, %d before the suspend: the process started again", first, beforeSuspend)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if n, err := r2.counter(sb.ID); err != nil || n <= first {
			return fmt.Errorf("counter %d (%v), was %d: %w", n, err, first, errNotYet)
		}
		return nil
	})
	t.Logf("suspended on %s, woke on %s; counter %d after the wake and counting", sb.Worker, woke.Worker, first)
}

// lifecycle posts a lifecycle verb (suspend, wake, …) and waits for its
// operation to succeed.
func lifecycle(t *testing.T, a *api, id, verb string) {
	t.Helper()
	var out apiv1.SandboxAndOperation
	if code := a.do("POST", "/v1/sandboxes/"+id+"/"+verb, nil, &out); code != http.StatusAccepted {
		t.Fatalf("%s %s: HTTP %d", verb, id, code)
	}
	if op := a.waitOperation(out.Operation.ID, 5*time.Minute); op.State != "succeeded" {
		t.Fatalf("%s %s: %s %s", verb, id, op.State, errorOf(op))
	}
}

// cordon marks a worker node unschedulable until the test ends.
func cordon(t *testing.T, node string) {
	t.Helper()
	set := func(unschedulable bool) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, unschedulable)
		_, err := cl.Kube().CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		return err
	}
	if err := set(true); err != nil {
		t.Fatalf("cordon %s: %v", node, err)
	}
	t.Cleanup(func() {
		if err := set(false); err != nil {
			t.Errorf("uncordon %s: %v", node, err)
		}
	})
}
