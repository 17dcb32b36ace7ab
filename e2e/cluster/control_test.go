package cluster

import (
	"context"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/testenv"
)

// Control replicas' timings in the suite (ControlArgs in TestMain).
const (
	scheduleTimeout = 45 * time.Second
	operationLease  = 5 * time.Second
)

// bigMemoryMiB is more memory than any worker offers (2048 MiB; memory is
// never overcommitted, vCPUs are): such a Pod never binds.
const bigMemoryMiB = 4096

// A create no worker can take stays pending with a progress step, then
// ends resource_exhausted after --schedule-timeout; its Pod is gone and
// the sandbox reads failed.
func TestUnschedulableCreate(t *testing.T) {
	r := replica(t, 0)
	created := r.createSandbox(1, bigMemoryMiB)
	id := created.Sandbox.ID
	t.Cleanup(func() { r.deleteSandbox(id) })
	step := ""
	deadline := time.Now().Add(scheduleTimeout + 2*time.Minute)
	var op = created.Operation
	for op.DoneAt == nil {
		if time.Now().After(deadline) {
			t.Fatalf("create of an unschedulable sandbox still %s after %v", op.State, time.Until(deadline)+scheduleTimeout+2*time.Minute)
		}
		time.Sleep(300 * time.Millisecond)
		if r.do("GET", "/v1/operations/"+op.ID, nil, &op) != http.StatusOK {
			t.Fatal("GET operation failed")
		}
		if op.Progress != nil && op.Progress.Step != "" {
			step = op.Progress.Step
		}
	}
	if op.State != "failed" || op.Error == nil || op.Error.Code != "resource_exhausted" {
		t.Fatalf("unschedulable create ended %s (%s), want failed resource_exhausted", op.State, errorOf(op))
	}
	if step == "" {
		t.Error("the pending create never showed a progress step")
	}
	if sb := r.sandbox(id); sb.State != "failed" || sb.Worker != "" {
		t.Errorf("sandbox after the failed create: state %s worker %q", sb.State, sb.Worker)
	}
	waitNoPod(t, id)
}

// A control replica SIGKILLed while it runs an operation: the other
// replica takes the operation over once its lease expires and ends it,
// with the sandbox's state true and its Pod gone.
func TestControlKilledMidOperation(t *testing.T) {
	r0, r1 := replica(t, 0), replica(t, 1)
	created := r0.createSandbox(1, bigMemoryMiB) // waits for a binding that never comes
	id := created.Sandbox.ID
	t.Cleanup(func() { r1.deleteSandbox(id) })
	testenv.Eventually(t, 30*time.Second, func() error {
		pod, _ := k8s.PodName(id)
		_, err := cl.Kube().CoreV1().Pods(cl.Info.Namespace).Get(context.Background(), pod, metav1.GetOptions{})
		return err // the replica is inside the operation once the Pod exists
	})
	cl.KillControl(0)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := cl.RestartControl(ctx, 0); err != nil {
			t.Errorf("restart control replica 1: %v", err)
		}
	})
	op := r1.waitOperation(created.Operation.ID, operationLease+scheduleTimeout+2*time.Minute)
	if op.State != "failed" || op.Error == nil {
		t.Fatalf("the operation of a killed replica ended %s (%s), want failed", op.State, errorOf(op))
	}
	if c := op.Error.Code; c != "aborted" && c != "resource_exhausted" {
		t.Errorf("the taken-over create ended %s, want aborted or resource_exhausted", errorOf(op))
	}
	// The take-over makes the sandbox true before it ends the operation:
	// read right after the operation is terminal, the sandbox is failed
	// already, never still creating.
	if sb := r1.sandbox(id); sb.State != "failed" {
		t.Fatalf("sandbox read as soon as the taken-over create was %s: %s, want failed", op.State, sb.State)
	}
	waitNoPod(t, id)
}

// waitNoPod waits (bounded) until sandbox id has no Pod.
func waitNoPod(t *testing.T, id string) {
	t.Helper()
	pod, _ := k8s.PodName(id)
	testenv.Eventually(t, time.Minute, func() error {
		_, err := cl.Kube().CoreV1().Pods(cl.Info.Namespace).Get(context.Background(), pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return errNotYet
		}
		return err
	})
}
