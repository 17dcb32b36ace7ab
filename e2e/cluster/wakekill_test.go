package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/testenv"
)

// TestWakeRightAfterWorkerKill: a sandbox suspended to object storage is
// woken through the API right after the worker it ran on was SIGKILLed,
// while that node still reads Ready; the other nodes are cordoned until
// the wake's Pod is bound to the dead one, so the race is the one a user
// hits when kube-scheduler picks the dead node. The wake still succeeds:
// its Pod is placed again on a live worker once Kubernetes reads the dead
// node NotReady.
func TestWakeRightAfterWorkerKill(t *testing.T) {
	r := replica(t, 0)
	sb := r.create(map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256})
	r.exec(sb.ID, "echo kept > /root/kept")
	lifecycle(t, r, sb.ID, "suspend")
	waitNoPod(t, sb.ID)

	dead := workerIndex(t, sb.Worker)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := cl.RestartWorker(ctx, dead); err != nil {
			t.Errorf("restart %s: %v", sb.Worker, err)
		}
	})
	// Cordoned until the wake's Pod is bound to the dead node (uncordoned
	// below; the cleanups uncordon again, harmlessly).
	var others []string
	for _, w := range cl.Info.Workers {
		if w.Name != sb.Worker {
			cordon(t, w.Name)
			others = append(others, w.Name)
		}
	}
	cl.KillWorker(dead)

	var out apiv1.SandboxAndOperation
	if code := r.do("POST", "/v1/sandboxes/"+sb.ID+"/wake", nil, &out); code != http.StatusAccepted {
		t.Fatalf("wake %s: HTTP %d", sb.ID, code)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if n := boundTo(sb.ID); n != sb.Worker {
			return fmt.Errorf("the wake's pod is on %q, not yet on the dead %s: %w", n, sb.Worker, errNotYet)
		}
		return nil
	})
	for _, n := range others {
		uncordon(t, n)
	}
	if op := r.waitOperation(out.Operation.ID, operationLease+3*scheduleTimeout+3*time.Minute); op.State != "succeeded" {
		t.Fatalf("wake right after %s was killed: %s %s", sb.Worker, op.State, errorOf(op))
	}
	woke := r.sandbox(sb.ID)
	if woke.State != "running" || woke.Worker == "" || woke.Worker == sb.Worker {
		t.Fatalf("after the wake: %s on %q, want running on a live worker (not %s)", woke.State, woke.Worker, sb.Worker)
	}
	if got := r.exec(sb.ID, "cat /root/kept"); got != "kept\n" {
		t.Fatalf("woken on %s, the file reads %q", woke.Worker, got)
	}
	t.Logf("suspended on %s, killed it, woke on %s", sb.Worker, woke.Worker)
}

// boundTo is the node sandbox id's Pod is bound to ("" when none).
func boundTo(id string) string {
	pod, err := cl.Kube().CoreV1().Pods(cl.Info.Namespace).Get(context.Background(), strings.ReplaceAll(id, "_", "-"), metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return pod.Spec.NodeName
}

// uncordon marks a worker node schedulable again.
func uncordon(t *testing.T, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.Kube().CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":false}}`),
		metav1.PatchOptions{}); err != nil {
		t.Fatalf("uncordon %s: %v", node, err)
	}
}
