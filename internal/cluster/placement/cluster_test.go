package placement_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

func spec(id string) worker.SandboxSpec {
	return worker.SandboxSpec{ID: id, Template: "base", VCPUs: 1, MemoryMiB: 256, Hostname: id, SecretScope: "ten_test"}
}

func bounded(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// podOf is sandbox id's Pod as the API server has it.
func (f *fleet) podOf(id string) (*corev1.Pod, error) {
	name, err := k8s.PodName(id)
	if err != nil {
		return nil, err
	}
	return f.client.CoreV1().Pods(f.ns).Get(context.Background(), name, metav1.GetOptions{})
}

// TestSpreadReadyDelete: six sandboxes created through the scheduler land
// on at least two of three nodes, each running on the worker of the node
// its Pod is bound to; calls reach that worker; delete removes Pod and VM.
func TestSpreadReadyDelete(t *testing.T) {
	f := newFleet(t, "spread")
	agents := []*nodeAgent{f.addNode("a", 4, 4096, 4), f.addNode("b", 4, 4096, 4), f.addNode("c", 4, 4096, 4)}
	p := f.placement(placement.Config{ScheduleTimeout: 60 * time.Second})
	if err := p.Ready(bounded(t, 10*time.Second)); err != nil {
		t.Fatalf("Ready with three Ready nodes: %v", err)
	}
	onNode := map[string]string{}
	for i := range 6 {
		id := fmt.Sprintf("sbx_spread_%d", i)
		st, err := p.CreateSandbox(bounded(t, 90*time.Second), spec(id))
		if err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		if st.ID != id || st.State != worker.VMRunning {
			t.Fatalf("create %s returned %+v", id, st)
		}
		pod, err := f.podOf(id)
		if err != nil {
			t.Fatal(err)
		}
		if !k8s.PodReady(pod) || pod.Spec.NodeName == "" {
			t.Fatalf("pod of %s after create: phase %s node %q", id, pod.Status.Phase, pod.Spec.NodeName)
		}
		onNode[id] = pod.Spec.NodeName
	}
	used := map[string]int{}
	for id, n := range onNode {
		used[n]++
		for _, a := range agents {
			has, creates := a.w.has(id)
			if want := a.name == n; has != want || (want && creates != 1) {
				t.Errorf("%s bound to %s; worker of %s has it: %v (created %d times)", id, n, a.name, has, creates)
			}
		}
	}
	t.Logf("spread over nodes: %v", used)
	if len(used) < 2 {
		t.Errorf("six sandboxes on %d node(s): %v", len(used), used)
	}

	// A call on a sandbox reaches the worker that owns its node.
	id := "sbx_spread_0"
	st, err := p.PauseSandbox(bounded(t, 10*time.Second), id)
	if err != nil || st.State != worker.VMPaused {
		t.Fatalf("pause: %+v %v", st, err)
	}
	for _, a := range agents {
		if a.name == onNode[id] {
			if got, _ := a.w.Sandbox(context.Background(), id); got.State != worker.VMPaused {
				t.Errorf("owning worker has %s %s, want paused", id, got.State)
			}
		}
	}
	list, err := p.Sandboxes(bounded(t, 10*time.Second))
	if err != nil || len(list) != 6 {
		t.Errorf("Sandboxes: %d, %v; want 6", len(list), err)
	}

	for i := range 6 {
		id := fmt.Sprintf("sbx_spread_%d", i)
		if err := p.DeleteSandbox(bounded(t, 90*time.Second), id); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
		if _, err := f.podOf(id); !apierrors.IsNotFound(err) {
			t.Errorf("pod of %s after delete: %v", id, err)
		}
	}
	for _, a := range agents {
		if n := a.w.count(); n != 0 {
			t.Errorf("worker of %s still has %d sandboxes after delete", a.name, n)
		}
	}
	if err := p.DeleteSandbox(bounded(t, 10*time.Second), "sbx_spread_0"); err != nil {
		t.Errorf("second delete: %v", err)
	}
	if _, err := p.Sandbox(bounded(t, 10*time.Second), "sbx_spread_0"); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("Sandbox after delete: %v, want not_found", err)
	}
	if _, err := p.CreateSandbox(bounded(t, 10*time.Second), worker.SandboxSpec{ID: "sbx_bad", VCPUs: 0, MemoryMiB: 256}); errdefs.ClassOf(err) != errdefs.ErrInvalidArgument {
		t.Errorf("create with 0 vcpus: %v, want invalid_argument", err)
	}
}

// TestCapacityExhausted: a sandbox no node can fit ends resource_exhausted
// after the bounded wait, and leaves no Pod.
func TestCapacityExhausted(t *testing.T) {
	f := newFleet(t, "full")
	f.addNode("a", 2, 2048, 2)
	p := f.placement(placement.Config{ScheduleTimeout: 5 * time.Second})
	big := spec("sbx_full_big")
	big.VCPUs = 8
	_, err := p.CreateSandbox(bounded(t, 60*time.Second), big)
	if errdefs.ClassOf(err) != errdefs.ErrResourceExhausted {
		t.Fatalf("create too big: %v, want resource_exhausted", err)
	}
	_, msg, _ := errdefs.Render(err)
	t.Logf("tenant reads: %s", msg)
	if _, err := f.podOf(big.ID); !apierrors.IsNotFound(err) {
		t.Errorf("pod after exhausted create: %v, want gone", err)
	}
	// The node's sandbox count is capacity too.
	for i := range 2 {
		if _, err := p.CreateSandbox(bounded(t, 60*time.Second), spec(fmt.Sprintf("sbx_full_%d", i))); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if _, err := p.CreateSandbox(bounded(t, 60*time.Second), spec("sbx_full_third")); errdefs.ClassOf(err) != errdefs.ErrResourceExhausted {
		t.Fatalf("third sandbox on a node for two: %v, want resource_exhausted", err)
	}
}

// TestCreateFailedOnWorker: a worker that cannot create the sandbox fails
// its Pod; the create returns the worker's class and tenant-safe message
// and removes the Pod.
func TestCreateFailedOnWorker(t *testing.T) {
	f := newFleet(t, "fail")
	a := f.addNode("a", 2, 2048, 2)
	a.w.mu.Lock()
	a.w.createErr = errdefs.New(errdefs.ErrResourceExhausted, "the worker's disk is full").WithCause(errors.New("/var/lib/space: ENOSPC"))
	a.w.mu.Unlock()
	p := f.placement(placement.Config{ScheduleTimeout: 60 * time.Second})
	_, err := p.CreateSandbox(bounded(t, 90*time.Second), spec("sbx_fail_1"))
	class, msg, _ := errdefs.Render(err)
	if class != errdefs.ErrResourceExhausted || msg != "the worker's disk is full" {
		t.Fatalf("create on failing worker: %v (%s: %q)", err, class.Code(), msg)
	}
	if _, err := f.podOf("sbx_fail_1"); !apierrors.IsNotFound(err) {
		t.Errorf("pod after failed create: %v, want gone", err)
	}
}

// TestBranchFollowsCheckpoint: a branch's Pod may only be bound to the node
// whose worker keeps its checkpoint; a branch of a checkpoint no worker
// keeps is not_found and makes no Pod.
func TestBranchFollowsCheckpoint(t *testing.T) {
	f := newFleet(t, "branch")
	f.addNode("a", 4, 4096, 4)
	b := f.addNode("b", 4, 4096, 4)
	f.addNode("c", 4, 4096, 4)
	b.w.mu.Lock()
	b.w.ckpts = []worker.CheckpointStatus{{ID: "ckpt_on_b", SandboxID: "sbx_parent"}}
	b.w.mu.Unlock()
	p := f.placement(placement.Config{ScheduleTimeout: 60 * time.Second})
	for i := range 3 {
		s := spec(fmt.Sprintf("sbx_branch_%d", i))
		s.FromCheckpoint = "ckpt_on_b"
		if _, err := p.CreateSandbox(bounded(t, 90*time.Second), s); err != nil {
			t.Fatalf("branch %d: %v", i, err)
		}
		if has, _ := b.w.has(s.ID); !has {
			pod, _ := f.podOf(s.ID)
			t.Errorf("branch %s not on the checkpoint's node %s (pod on %q)", s.ID, b.name, pod.Spec.NodeName)
		}
	}
	s := spec("sbx_branch_orphan")
	s.FromCheckpoint = "ckpt_nowhere"
	if _, err := p.CreateSandbox(bounded(t, 30*time.Second), s); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("branch of unknown checkpoint: %v, want not_found", err)
	}
	if _, err := f.podOf(s.ID); !apierrors.IsNotFound(err) {
		t.Errorf("pod of refused branch: %v", err)
	}
}
