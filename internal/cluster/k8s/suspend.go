package k8s

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// RestoreSuspend in AnnotationRestore ("suspend/<sandbox id>") makes the
// Pod the wake of a sandbox suspended to object storage: its worker
// creates the sandbox from worker.SuspendSnapshot(id).
const RestoreSuspend = "suspend"

// annotateSuspend adds the restore annotation of a wake (spec.FromSnapshot
// set): it must name the sandbox's own snapshot, and a spec cannot be both
// a branch and a wake.
func annotateSuspend(spec worker.SandboxSpec, annotations map[string]string) error {
	if spec.FromSnapshot == "" {
		return nil
	}
	if spec.FromSnapshot != worker.SuspendSnapshot(spec.ID) || spec.FromCheckpoint != "" {
		return fmt.Errorf("sandbox %s: it can wake only from its own snapshot %s, and not as a branch: %w",
			spec.ID, worker.SuspendSnapshot(spec.ID), errdefs.ErrInvalidArgument)
	}
	annotations[AnnotationRestore] = RestoreSuspend + "/" + spec.ID
	return nil
}

// specWithSuspend makes spec the create-from-snapshot of the wake the Pod's
// restore annotation names ("suspend/<id>", id the Pod's sandbox), so the
// worker never trusts a snapshot name from the spec alone.
func specWithSuspend(pod *corev1.Pod, spec worker.SandboxSpec) (worker.SandboxSpec, error) {
	kind, id, _ := strings.Cut(pod.Annotations[AnnotationRestore], "/")
	if kind != RestoreSuspend {
		if spec.FromSnapshot != "" {
			return spec, fmt.Errorf("pod %s/%s: spec wakes from %s without the %s annotation: %w",
				pod.Namespace, pod.Name, spec.FromSnapshot, AnnotationRestore, errdefs.ErrInvalidArgument)
		}
		return spec, nil
	}
	if id != spec.ID {
		return spec, fmt.Errorf("pod %s/%s: %s names sandbox %q, the spec is %q's: %w",
			pod.Namespace, pod.Name, AnnotationRestore, id, spec.ID, errdefs.ErrInvalidArgument)
	}
	spec.FromSnapshot = worker.SuspendSnapshot(id)
	return spec, nil
}

// IsWake reports whether the Pod is the wake of a suspended sandbox.
func IsWake(pod *corev1.Pod) bool {
	kind, _, _ := strings.Cut(pod.Annotations[AnnotationRestore], "/")
	return kind == RestoreSuspend
}

// AnnotationSuspended marks a sandbox Pod the control plane deletes
// because its sandbox was suspended to object storage: that deletion is no
// loss, and every control replica (not only the one that suspended) reads
// it so.
const AnnotationSuspended = "space.dev/suspended"

// Suspended reports whether the Pod is being removed after a suspend.
func Suspended(pod *corev1.Pod) bool { return pod.Annotations[AnnotationSuspended] == "true" }
