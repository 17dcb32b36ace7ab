package placement_test

import (
	"context"
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

// nextExit waits, bounded, for the next Exit.
func nextExit(t *testing.T, p *placement.Placement, d time.Duration) worker.Exit {
	t.Helper()
	select {
	case ex := <-p.Exits():
		return ex
	case <-time.After(d):
		t.Fatalf("no exit within %s", d)
	}
	return worker.Exit{}
}

// TestWorkerDies: a node agent that stops renewing its Lease makes its
// node NotReady; the node lifecycle controller evicts its sandbox Pods
// (tolerationSeconds 2 here) and each becomes an Exit saying the worker
// was lost; the sandbox on the other node is untouched.
func TestWorkerDies(t *testing.T) {
	f := newFleet(t, "dies")
	a := f.addNode("a", 2, 2048, 1)
	b := f.addNode("b", 2, 2048, 1)
	p := f.placement(placement.Config{ScheduleTimeout: 60 * time.Second})
	// One sandbox per node: each node offers one.
	for _, id := range []string{"sbx_dies_1", "sbx_dies_2"} {
		if _, err := p.CreateSandbox(bounded(t, 90*time.Second), spec(id)); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
	}
	victim, survivor := "sbx_dies_1", "sbx_dies_2"
	if has, _ := b.w.has(victim); has {
		victim, survivor = survivor, victim
	}
	f.stop(a)
	ex := nextExit(t, p, 90*time.Second)
	class, msg, _ := errdefs.Render(ex.Err)
	if ex.SandboxID != victim || class != errdefs.ErrUnavailable || msg != "the worker running the sandbox was lost" {
		t.Fatalf("exit: %s %v (%s %q); want %s lost", ex.SandboxID, ex.Err, class.Code(), msg, victim)
	}
	n, err := f.client.CoreV1().Nodes().Get(context.Background(), a.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			t.Errorf("dead node %s still reads Ready", a.name)
		}
	}
	st, err := p.Sandbox(bounded(t, 10*time.Second), victim)
	if err != nil || st.State != worker.VMStopped || st.Lost == "" {
		t.Errorf("lost sandbox reads %+v, %v; want stopped with a Lost reason", st, err)
	}
	if _, err := p.PauseSandbox(bounded(t, 10*time.Second), victim); errdefs.ClassOf(err) != errdefs.ErrUnavailable {
		t.Errorf("pause lost sandbox: %v, want unavailable", err)
	}
	if st, err := p.Sandbox(bounded(t, 10*time.Second), survivor); err != nil || st.State != worker.VMRunning {
		t.Errorf("sandbox on the live node: %+v %v", st, err)
	}
	// Deleting the lost sandbox does not wait on the dead node.
	if err := p.DeleteSandbox(bounded(t, 30*time.Second), victim); err != nil {
		t.Fatalf("delete lost sandbox: %v", err)
	}
	if _, err := f.podOf(victim); !apierrors.IsNotFound(err) {
		t.Errorf("pod of lost sandbox after delete: %v", err)
	}
	select {
	case ex := <-p.Exits():
		t.Errorf("unexpected second exit %s: %v", ex.SandboxID, ex.Err)
	default:
	}
}

// TestVMStopsAndOutsideDelete: a VM that stops on its own fails its Pod
// with the worker's words, which is an Exit; a Pod deleted from outside
// SPACE is an Exit too, and its VM is deleted on the worker.
func TestVMStopsAndOutsideDelete(t *testing.T) {
	f := newFleet(t, "exits")
	a := f.addNode("a", 4, 4096, 4)
	p := f.placement(placement.Config{ScheduleTimeout: 60 * time.Second})
	for _, id := range []string{"sbx_exits_1", "sbx_exits_2"} {
		if _, err := p.CreateSandbox(bounded(t, 90*time.Second), spec(id)); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
	}
	a.w.stopVM("sbx_exits_1", "the sandbox's VM used more memory than it may")
	ex := nextExit(t, p, 30*time.Second)
	if _, msg, _ := errdefs.Render(ex.Err); ex.SandboxID != "sbx_exits_1" || msg != "the sandbox's VM used more memory than it may" {
		t.Fatalf("exit after VM stop: %s %q", ex.SandboxID, msg)
	}
	pod, err := f.podOf("sbx_exits_1")
	if err != nil || pod.Status.Phase != corev1.PodFailed {
		t.Fatalf("pod of stopped VM: %v %v", pod.Status.Phase, err)
	}

	name, _ := k8s.PodName("sbx_exits_2")
	if err := f.client.CoreV1().Pods(f.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ex = nextExit(t, p, 30*time.Second)
	if _, msg, _ := errdefs.Render(ex.Err); ex.SandboxID != "sbx_exits_2" || msg != "the sandbox's Pod was deleted outside SPACE" {
		t.Fatalf("exit after outside delete: %s %q", ex.SandboxID, msg)
	}
	f.eventually(30*time.Second, "VM of the deleted Pod gone from the worker", func() (bool, string) {
		has, _ := a.w.has("sbx_exits_2")
		return !has, "still there"
	})
	for _, id := range []string{"sbx_exits_1", "sbx_exits_2"} {
		if err := p.DeleteSandbox(bounded(t, 60*time.Second), id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
	if n := a.w.count(); n != 0 {
		t.Errorf("worker keeps %d sandboxes", n)
	}
}

// TestNodeRestartAdopts: a node agent started again adopts the sandboxes
// of the Pods still bound to it (no second create) and deletes the one
// whose Pod went while it was away; the worker's Ready is the node's
// (checked with no sandbox on it: a node that is not Ready loses its Pods).
func TestNodeRestartAdopts(t *testing.T) {
	f := newFleet(t, "adopt")
	a := f.addNode("a", 4, 4096, 4)
	p := f.placement(placement.Config{ScheduleTimeout: 60 * time.Second})
	for _, id := range []string{"sbx_adopt_1", "sbx_adopt_2"} {
		if _, err := p.CreateSandbox(bounded(t, 90*time.Second), spec(id)); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
	}
	f.stop(a)
	pod, err := f.podOf("sbx_adopt_2")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.client.CoreV1().Pods(f.ns).Delete(context.Background(), pod.Name, *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	f.start(a, 4, 4096, 4)
	f.eventually(30*time.Second, "VM without a Pod deleted on restart", func() (bool, string) {
		has, _ := a.w.has("sbx_adopt_2")
		return !has, "still there"
	})
	has, creates := a.w.has("sbx_adopt_1")
	if !has || creates != 1 {
		t.Errorf("after restart the worker has sbx_adopt_1: %v, created %d times; want adopted once", has, creates)
	}
	if st, err := p.Sandbox(bounded(t, 10*time.Second), "sbx_adopt_1"); err != nil || st.State != worker.VMRunning {
		t.Errorf("adopted sandbox: %+v %v", st, err)
	}

	if err := p.DeleteSandbox(bounded(t, 60*time.Second), "sbx_adopt_1"); err != nil {
		t.Fatalf("delete adopted: %v", err)
	}
	if n := a.w.count(); n != 0 {
		t.Errorf("worker keeps %d sandboxes", n)
	}

	a.w.setNotReady(errdefs.New(errdefs.ErrUnavailable, "kernel missing"))
	f.eventually(30*time.Second, "node NotReady from the worker's Ready", func() (bool, string) {
		err := p.Ready(context.Background())
		return errdefs.ClassOf(err) == errdefs.ErrUnavailable, "placement still ready"
	})
	a.w.setNotReady(nil)
	f.eventually(30*time.Second, "node Ready again", func() (bool, string) {
		return p.Ready(context.Background()) == nil, "not ready"
	})
}
