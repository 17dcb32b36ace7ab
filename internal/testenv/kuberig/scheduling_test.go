package kuberig_test

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/testenv/kuberig"
)

// Each wait is bounded; the longest, eviction from a dead node, is the node
// grace period plus the pod's toleration plus the controllers' periods.
const (
	shortWait = 30 * time.Second
	longWait  = 90 * time.Second
)

func TestMain(m *testing.M) {
	code := m.Run()
	kuberig.StopShared(code != 0)
	os.Exit(code)
}

func rig(t *testing.T) *kuberig.Cluster {
	t.Helper()
	return kuberig.Shared(t, kuberig.Options{})
}

// sandboxPod is a Pod shaped like a SPACE sandbox's: it selects worker
// nodes (plus this test's own) and, when tolerate is set, tolerates their
// taint.
func sandboxPod(name, test string, tolerate bool) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{workerLabel: "true", testLabel: test},
			Containers: []corev1.Container{{
				Name: "vm", Image: "space.dev/sandbox",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: mustQuantity("1"), corev1.ResourceMemory: mustQuantity("512Mi"),
				}},
			}},
		},
	}
	if tolerate {
		pod.Spec.Tolerations = []corev1.Toleration{{
			Key: sandboxTaint, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule,
		}}
	}
	return pod
}

// schedulable: the node lifecycle controller has seen it Ready and lifted
// the not-ready taint admission put on it at registration.
func schedulable(n *corev1.Node) bool {
	return readyStatus(n) == corev1.ConditionTrue && !hasTaint(n, "node.kubernetes.io/not-ready", corev1.TaintEffectNoSchedule)
}

func TestSchedulerBindsOnlyTolerantPodsToWorkerNode(t *testing.T) {
	c := rig(t)
	ctx := context.Background()
	const test = "binds"
	registerNode(t, c.Client, "space-binds", test)
	waitNode(t, c.Client, "space-binds", "schedulable", shortWait, schedulable)

	pods := c.Client.CoreV1().Pods("default")
	for _, p := range []*corev1.Pod{sandboxPod("tolerant", test, true), sandboxPod("intolerant", test, false)} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
		t.Cleanup(func() {
			zero := int64(0)
			_ = pods.Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
	}
	bound := waitPod(t, c.Client, "default", "tolerant", "bound by the scheduler", shortWait, func(p *corev1.Pod) bool {
		return p.Spec.NodeName != ""
	})
	if bound.Spec.NodeName != "space-binds" {
		t.Errorf("tolerant pod bound to %q, want space-binds", bound.Spec.NodeName)
	}
	pending := waitPod(t, c.Client, "default", "intolerant", "marked unschedulable", shortWait, func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})
	if pending.Spec.NodeName != "" || pending.Status.Phase != corev1.PodPending {
		t.Errorf("intolerant pod: node %q phase %s, want unbound and Pending", pending.Spec.NodeName, pending.Status.Phase)
	}
}

// A node whose heartbeat stops reads NotReady (Ready Unknown), gets the
// unreachable NoExecute taint, and its pods are evicted once their
// toleration runs out. A second, live node keeps the zone only partly
// down: with every node of a zone down the controller suspects itself and
// evicts nothing.
func TestDeadNodeGoesNotReadyAndEvicts(t *testing.T) {
	c := rig(t)
	ctx := context.Background()
	const test = "dead"
	registerNode(t, c.Client, "space-live", test)
	dead := registerNode(t, c.Client, "space-dead", test)
	waitNode(t, c.Client, "space-live", "schedulable", shortWait, schedulable)
	waitNode(t, c.Client, "space-dead", "schedulable", shortWait, schedulable)

	pod := sandboxPod("on-dead-node", test, true)
	pod.Spec.NodeSelector["kubernetes.io/hostname"] = "space-dead"
	seconds := int64(5)
	for _, key := range []string{"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"} {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{
			Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &seconds,
		})
	}
	pods := c.Client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	waitPod(t, c.Client, "default", pod.Name, "bound to space-dead", shortWait, func(p *corev1.Pod) bool {
		return p.Spec.NodeName == "space-dead"
	})

	dead.stopHeartbeat()
	waitNode(t, c.Client, "space-dead", "NotReady with the unreachable taint", longWait, func(n *corev1.Node) bool {
		return readyStatus(n) == corev1.ConditionUnknown &&
			hasTaint(n, "node.kubernetes.io/unreachable", corev1.TaintEffectNoExecute)
	})
	// No kubelet confirms the deletion, so an evicted pod stays with a
	// deletion timestamp: that, and the condition saying why, is eviction.
	evicted := waitPod(t, c.Client, "default", pod.Name, "evicted by the taint manager", longWait, func(p *corev1.Pod) bool {
		return p.DeletionTimestamp != nil
	})
	var reason string
	for _, cond := range evicted.Status.Conditions {
		if cond.Type == corev1.DisruptionTarget && cond.Status == corev1.ConditionTrue {
			reason = cond.Reason
		}
	}
	if reason != "DeletionByTaintManager" {
		t.Errorf("evicted pod's DisruptionTarget reason = %q, want DeletionByTaintManager (conditions %+v)", reason, evicted.Status.Conditions)
	}
	if n := waitNode(t, c.Client, "space-live", "still Ready", shortWait, schedulable); hasTaint(n, "node.kubernetes.io/unreachable", corev1.TaintEffectNoExecute) {
		t.Errorf("live node got the unreachable taint: %v", n.Spec.Taints)
	}
}
