package node

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// Why a sandbox Pod's container is waiting or ended.
const (
	waitingCreating  = "Creating"
	readySuspended   = "Suspended"
	terminatedDelete = "Deleted"
)

func condition(t corev1.PodConditionType, ok bool, reason string, now metav1.Time) corev1.PodCondition {
	s := corev1.ConditionFalse
	if ok {
		s = corev1.ConditionTrue
	}
	return corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: now}
}

// pendingStatus: bound here, the sandbox is being created.
func pendingStatus(hostIP string, now time.Time) corev1.PodStatus {
	t := metav1.NewTime(now)
	return corev1.PodStatus{
		Phase:     corev1.PodPending,
		HostIP:    hostIP,
		StartTime: &t,
		Conditions: []corev1.PodCondition{
			condition(corev1.PodScheduled, true, "", t),
			condition(corev1.PodReady, false, waitingCreating, t),
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: k8s.ContainerName, Image: k8s.ContainerImage,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waitingCreating}}}},
	}
}

// runningStatus: the worker has the sandbox; Ready unless it is suspended
// (its snapshot is on this worker, so the Pod keeps its place here).
func runningStatus(hostIP string, st worker.SandboxStatus, started *metav1.Time, now time.Time) corev1.PodStatus {
	t := metav1.NewTime(now)
	if started == nil {
		started = &t
	}
	booted := metav1.NewTime(st.BootedAt)
	if st.BootedAt.IsZero() {
		booted = *started
	}
	ready, why := true, ""
	if st.State == worker.VMSuspended {
		ready, why = false, readySuspended
	}
	return corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    hostIP,
		StartTime: started,
		Conditions: []corev1.PodCondition{
			condition(corev1.PodScheduled, true, "", t),
			condition(corev1.PodInitialized, true, "", t),
			condition(corev1.ContainersReady, ready, why, t),
			condition(corev1.PodReady, ready, why, t),
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: k8s.ContainerName, Image: k8s.ContainerImage,
			Ready: ready, Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: booted}}}},
	}
}

// failedStatus: the sandbox could not be made or its VM is gone. reason is
// one of k8s's Reason constants; err is rendered for tenants (errdefs.Render)
// and its class recorded in the k8s.ConditionError condition.
func failedStatus(hostIP string, reason string, err error, started *metav1.Time, now time.Time) corev1.PodStatus {
	t := metav1.NewTime(now)
	if started == nil {
		started = &t
	}
	class, msg, _ := errdefs.Render(err)
	return corev1.PodStatus{
		Phase:     corev1.PodFailed,
		Reason:    reason,
		Message:   msg,
		HostIP:    hostIP,
		StartTime: started,
		Conditions: []corev1.PodCondition{
			condition(corev1.PodScheduled, true, "", t),
			condition(corev1.PodReady, false, reason, t),
			{Type: k8s.ConditionError, Status: corev1.ConditionTrue, Reason: class.Code(), Message: msg, LastTransitionTime: t},
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: k8s.ContainerName, Image: k8s.ContainerImage,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: reason, Message: msg, FinishedAt: t}}}},
	}
}

// deletedStatus: the sandbox was deleted on request. A Failed Pod stays
// Failed (the API server refuses to leave a terminal phase).
func deletedStatus(prev corev1.PodStatus, now time.Time) corev1.PodStatus {
	t := metav1.NewTime(now)
	st := *prev.DeepCopy()
	if st.Phase != corev1.PodFailed {
		st.Phase = corev1.PodSucceeded
	}
	st.Conditions = []corev1.PodCondition{condition(corev1.PodReady, false, terminatedDelete, t)}
	for _, c := range prev.Conditions {
		if c.Type == k8s.ConditionError || c.Type == corev1.PodScheduled {
			st.Conditions = append(st.Conditions, c)
		}
	}
	st.ContainerStatuses = []corev1.ContainerStatus{{Name: k8s.ContainerName, Image: k8s.ContainerImage,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: terminatedDelete, FinishedAt: t}}}}
	return st
}

// vmGone is the error of a sandbox whose VM the worker no longer runs, in
// a tenant's words: what the worker knows of why, or a generic message.
func vmGone(st worker.SandboxStatus, cause error) error {
	why := "the sandbox's VM stopped unexpectedly"
	if st.Lost != "" {
		why = st.Lost
	}
	return errdefs.New(errdefs.ErrUnavailable, "%s", why).WithCause(cause)
}
