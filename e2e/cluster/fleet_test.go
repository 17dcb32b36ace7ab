package cluster

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
)

// fleetSize fills the fleet: three workers of 2 vCPUs, 1-vCPU sandboxes.
const fleetSize = 6

// Six sandboxes created through replica 1 are spread by kube-scheduler
// over the workers (each Pod bound to the node Sandbox.worker names), and
// replica 2 serves them (exec with output).
func TestFleet(t *testing.T) {
	r0, r1 := replica(t, 0), replica(t, 1)
	var ids []string
	var ops []string
	for range fleetSize {
		c := r0.createSandbox(1, 256)
		ids = append(ids, c.Sandbox.ID)
		ops = append(ops, c.Operation.ID)
	}
	t.Cleanup(func() {
		for _, id := range ids {
			r1.deleteSandbox(id)
		}
	})
	for i, op := range ops {
		// A worker's first sandbox makes the template's ready snapshot.
		if got := r0.waitOperation(op, 8*time.Minute); got.State != "succeeded" {
			t.Fatalf("create %s: %s (%s)", ids[i], got.State, errorOf(got))
		}
	}
	byWorker := map[string][]string{}
	for _, id := range ids {
		sb := r1.sandbox(id)
		if sb.State != "running" || sb.Worker == "" {
			t.Fatalf("sandbox %s via replica 2: state %s worker %q", id, sb.State, sb.Worker)
		}
		pod, _ := k8s.PodName(id)
		p, err := cl.Kube().CoreV1().Pods(cl.Info.Namespace).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil || p.Spec.NodeName != sb.Worker {
			t.Fatalf("sandbox %s: worker %q, its Pod %v (err %v)", id, sb.Worker, p.Spec.NodeName, err)
		}
		byWorker[sb.Worker] = append(byWorker[sb.Worker], id)
		if out := r1.exec(id, "echo hello from "+id); out != "hello from "+id+"\n" {
			t.Errorf("exec in %s via replica 2: %q", id, out)
		}
	}
	if len(byWorker) < 2 {
		t.Fatalf("six sandboxes on %d worker(s): %v; want them spread", len(byWorker), byWorker)
	}
	t.Logf("spread: %v", byWorker)

}
