package helm

import (
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/worker"
)

// checkDrainMarkOnly shows the admission policy holding the worker's
// pods patch to a drain's mark: on its own node's sandbox Pod, a label or
// another annotation is refused, the drain's annotation is not (a
// dry run, so nothing is marked).
func checkDrainMarkOnly(t *testing.T, workerClient kubernetes.Interface, id string) {
	t.Helper()
	ctx := bounded(t, 30*time.Second)
	name, err := k8s.PodName(id)
	if err != nil {
		t.Fatal(err)
	}
	pods := workerClient.CoreV1().Pods(sandboxNS)
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	for _, patch := range []string{
		`{"metadata":{"labels":{"space.dev/tenant":"someone-else"}}}`,
		`{"metadata":{"annotations":{"space.dev/spec":"{}"}}}`,
		`{"metadata":{"annotations":{"space.dev/restore":null}}}`,
	} {
		_, err := pods.Patch(ctx, name, types.MergePatchType, []byte(patch), dry)
		if err == nil || !strings.Contains(err.Error(), "only to record a node drain") {
			t.Errorf("the worker patching its Pod with %s: %v, want the admission policy's refusal", patch, err)
		}
	}
	mark, _ := k8s.DrainMark(worker.SuspendSnapshot(id), nil)
	if _, err := pods.Patch(ctx, name, types.MergePatchType, mark, dry); err != nil {
		t.Errorf("the worker marking its Pod drained (dry run): %v", err)
	}
}

// drainOnce evicts sandbox id's Pod through the Eviction API, as kubectl
// drain does, and waits for placement to report it and see the drain end
// suspended.
func drainOnce(t *testing.T, admin kubernetes.Interface, p *placement.Placement, id string) {
	t.Helper()
	ctx := bounded(t, 90*time.Second)
	name, err := k8s.PodName(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.PolicyV1().Evictions(sandboxNS).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sandboxNS}}); err != nil {
		t.Fatalf("evict the sandbox's Pod: %v", err)
	}
	// Placement reports the eviction (a drain, no loss) once its informer
	// has it; then it follows the drain.
	for seen := false; !seen; {
		select {
		case ex := <-p.Exits():
			if ex.SandboxID == id && (!ex.Drain || ex.Err != nil) {
				t.Fatalf("the eviction read as %+v, want an Exit with Drain set", ex)
			}
			seen = ex.SandboxID == id
		case <-ctx.Done():
			t.Fatal("no Exit with Drain set for the eviction")
		}
	}
	st, err := p.AwaitDrain(ctx, id)
	if err != nil || st.State != worker.VMSuspended {
		t.Fatalf("drain of the sandbox: %+v, %v; want suspended", st, err)
	}
}
