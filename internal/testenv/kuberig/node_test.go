package kuberig_test

import (
	"context"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// The labels and taint a SPACE worker's node carries (issue 11).
const (
	workerLabel  = "space.dev/worker"
	sandboxTaint = "space.dev/sandbox"
	testLabel    = "space.dev/test" // keeps each test's nodes apart on the shared rig
)

// handNode is a Node registered by the test the way a virtual-kubelet style
// worker registers one, with a Lease heartbeat the test can stop.
type handNode struct {
	name   string
	stop   context.CancelFunc
	done   sync.WaitGroup
	client kubernetes.Interface
}

// registerNode creates a worker Node (label, taint, capacity, Ready) and
// renews its Lease every second until stopHeartbeat or the test's end.
func registerNode(t *testing.T, client kubernetes.Interface, name, test string) *handNode {
	t.Helper()
	ctx := context.Background()
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("10"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			workerLabel: "true", testLabel: test, "kubernetes.io/hostname": name,
		}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: sandboxTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
	}
	// A Node takes its status on create (as a kubelet's registration
	// does); a separate status update would race the controllers that
	// taint the new node.
	node.Status = corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "WorkerReady",
			LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
	}
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	hctx, cancel := context.WithCancel(ctx)
	n := &handNode{name: name, stop: cancel, client: client}
	if err := n.renew(ctx, created); err != nil {
		t.Fatalf("node %s lease: %v", name, err)
	}
	n.done.Add(1)
	go func() {
		defer n.done.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-tick.C:
				_ = n.renew(hctx, created)
			}
		}
	}()
	t.Cleanup(func() {
		n.stopHeartbeat()
		_ = client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return n
}

// renew creates or renews the node's Lease in kube-node-lease.
func (n *handNode) renew(ctx context.Context, owner *corev1.Node) error {
	leases := n.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, n.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		seconds := int32(40)
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.name, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: owner.Name, UID: owner.UID,
			}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &n.name, LeaseDurationSeconds: &seconds, RenewTime: &now},
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

func (n *handNode) stopHeartbeat() {
	n.stop()
	n.done.Wait()
}

// waitNode polls the node until cond holds, failing the test after timeout.
func waitNode(t *testing.T, client kubernetes.Interface, name, what string, timeout time.Duration, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	var last *corev1.Node
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = n
		return cond(n), nil
	})
	if err != nil {
		t.Fatalf("node %s: %s: %v (taints %v, conditions %v)", name, what, err, taintsOf(last), conditionsOf(last))
	}
	return last
}

// waitPod polls the pod until cond holds, failing the test after timeout.
func waitPod(t *testing.T, client kubernetes.Interface, ns, name, what string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		var status any
		if last != nil {
			status = last.Status
		}
		t.Fatalf("pod %s/%s: %s: %v (status %+v)", ns, name, what, err, status)
	}
	return last
}

func hasTaint(n *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Key == key && taint.Effect == effect {
			return true
		}
	}
	return false
}

func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func taintsOf(n *corev1.Node) []corev1.Taint {
	if n == nil {
		return nil
	}
	return n.Spec.Taints
}

func conditionsOf(n *corev1.Node) []corev1.NodeCondition {
	if n == nil {
		return nil
	}
	return n.Status.Conditions
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }
