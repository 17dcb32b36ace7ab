package k8s

import (
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Reasons a worker writes on a sandbox Pod's status. The message beside
// each is in words a tenant may read: no host paths, no guest output.
const (
	// ReasonCreateFailed: the worker could not create the sandbox; the
	// Pod is Failed.
	ReasonCreateFailed = "SandboxCreateFailed"
	// ReasonVMStopped: the sandbox's VM stopped without being asked to
	// (crashed, killed for memory); the Pod is Failed.
	ReasonVMStopped = "SandboxVMStopped"
	// ReasonInvalidPod: the Pod carries no sandbox spec the worker can
	// read; the Pod is Failed.
	ReasonInvalidPod = "InvalidSandboxPod"
)

// WorkerAddress is the worker-protocol address ("host:port") a worker node
// advertises: its InternalIP status address and its AnnotationWorkerPort.
// ErrUnavailable when the node advertises none.
func WorkerAddress(node *corev1.Node) (string, error) {
	port, ok := node.Annotations[AnnotationWorkerPort]
	if n, err := strconv.Atoi(port); !ok || err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("node %s advertises no worker port (%s=%q): %w", node.Name, AnnotationWorkerPort, port, errdefs.ErrUnavailable)
	}
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && a.Address != "" {
			return net.JoinHostPort(a.Address, port), nil
		}
	}
	return "", fmt.Errorf("node %s has no InternalIP address: %w", node.Name, errdefs.ErrUnavailable)
}

// NodeReady reports whether a node's Ready condition is True.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodReady reports whether a Pod runs and its Ready condition is True: the
// worker has the sandbox up and its agent answering.
func PodReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Unschedulable returns the scheduler's message when it found no node for
// the Pod (its PodScheduled condition False, reason Unschedulable).
func Unschedulable(pod *corev1.Pod) (message string, ok bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message, true
		}
	}
	return "", false
}

// Evicted reports whether Kubernetes decided to take the Pod off its node
// (a DisruptionTarget condition, which the taint eviction controller sets
// before it deletes a Pod from a node that died) and says why.
func Evicted(pod *corev1.Pod) (reason string, ok bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return c.Reason, true
		}
	}
	return "", false
}

// ConditionError is the Pod condition a worker sets on a Pod it failed:
// Reason is the errdefs class code, Message the tenant-safe message, so
// the control plane answers with the same class the worker met.
const ConditionError corev1.PodConditionType = "space.dev/error"

// PodError is the error a worker recorded on a Failed Pod, of the class and
// with the message it gave (ErrUnavailable with the Pod's message when it
// recorded none), or nil when the Pod has not failed.
func PodError(pod *corev1.Pod) error {
	if pod.Status.Phase != corev1.PodFailed {
		return nil
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == ConditionError && c.Status == corev1.ConditionTrue {
			return errdefs.New(errdefs.FromCode(c.Reason), "%s", c.Message)
		}
	}
	msg := pod.Status.Message
	if msg == "" {
		msg = "the sandbox's worker reported it failed"
	}
	return errdefs.New(errdefs.ErrUnavailable, "%s", msg)
}
