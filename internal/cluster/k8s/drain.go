package k8s

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/space-sandbox/space/internal/errdefs"
)

// A node drain: `kubectl drain` (or a cordon and the Eviction API) of a
// worker's node deletes each sandbox Pod with a grace period after the API
// server marked it with a DisruptionTarget condition of reason
// ReasonEvictionByAPI. The worker then suspends the sandbox to object
// storage before it lets the Pod go and records what came of it on the
// Pod, in one of these annotations, so that every control replica tells a
// drained sandbox from a lost or deleted one.
const (
	// AnnotationDrained names the object-storage snapshot the sandbox was
	// suspended to for the drain (worker.SuspendSnapshot of its id).
	AnnotationDrained = "space.dev/drained"
	// AnnotationDrainError says why the drain's suspend failed:
	// "<errdefs code>: <message a tenant may read>". The sandbox is gone.
	AnnotationDrainError = "space.dev/drain-error"
	// ReasonEvictionByAPI is the DisruptionTarget reason the API server
	// writes for an eviction through the Eviction API (pods/eviction).
	ReasonEvictionByAPI = "EvictionByEvictionAPI"
	// DefaultDrainGraceSeconds is the termination grace period of sandbox
	// Pods: what an eviction gives the worker to suspend the sandbox
	// (queued behind at most its drain bound of others) before tools such
	// as kubectl drain --timeout or an autoscaler expect the Pod gone.
	DefaultDrainGraceSeconds = 600
)

// EvictedForDrain reports whether the Pod is being deleted by the Eviction
// API (a drain), not by its controller, a person or a dead node's taint.
func EvictedForDrain(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp == nil {
		return false
	}
	reason, ok := Evicted(pod)
	return ok && reason == ReasonEvictionByAPI
}

// DisruptionCondition is the Pod's DisruptionTarget condition, if any.
func DisruptionCondition(pod *corev1.Pod) (corev1.PodCondition, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			return c, true
		}
	}
	return corev1.PodCondition{}, false
}

// DrainMark is the annotation patch recording a drain's end on its Pod:
// the snapshot it was suspended to, or (when err is set) why it failed.
func DrainMark(snapshot string, err error) ([]byte, map[string]string) {
	ann := map[string]string{}
	if err != nil {
		class, msg, _ := errdefs.Render(err)
		ann[AnnotationDrainError] = class.Code() + ": " + msg
	} else {
		ann[AnnotationDrained] = snapshot
	}
	raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	return raw, ann
}

// DrainOutcome reads a drain's end from its Pod: marked is false while the
// worker has recorded none. A failed drain's error has the class and the
// words the worker gave.
func DrainOutcome(pod *corev1.Pod) (snapshot string, err error, marked bool) {
	if v, ok := pod.Annotations[AnnotationDrainError]; ok {
		code, msg, _ := strings.Cut(v, ": ")
		if msg == "" {
			msg = "the node drain could not suspend the sandbox"
		}
		return "", errdefs.New(errdefs.FromCode(code), "%s", msg), true
	}
	if v, ok := pod.Annotations[AnnotationDrained]; ok && v != "" {
		return v, nil, true
	}
	return "", nil, false
}

// DrainFailed is the error of a drain whose suspend failed, in a tenant's
// words, of cause's class.
func DrainFailed(cause error) error {
	class, msg, _ := errdefs.Render(cause)
	return errdefs.New(class, "the node drain's suspend of the sandbox failed: %s", msg).WithCause(fmt.Errorf("drain: %w", cause))
}
