package k8s

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// VMMOverheadMiB is the host memory a sandbox takes beyond its guest RAM:
// the VMM process (QEMU or Firecracker), its page tables and device
// buffers, the sandbox's egress proxy state. A Pod requests memory_mib plus
// this, so the scheduler never packs a node past what its VMs really use.
const VMMOverheadMiB = 64

// DefaultTolerationSeconds is how long a sandbox Pod stays bound to a node
// that is not ready or unreachable before the node lifecycle controller
// evicts it.
const DefaultTolerationSeconds = 30

// PodOptions shape the sandbox Pods the control plane creates.
type PodOptions struct {
	Namespace string
	// TolerationSeconds is the not-ready and unreachable toleration
	// (DefaultTolerationSeconds when 0).
	TolerationSeconds int64
	// GraceSeconds is the Pods' termination grace period: what an
	// eviction (a node drain) gives the worker to suspend the sandbox
	// (DefaultDrainGraceSeconds when 0).
	GraceSeconds int64
}

// SandboxPod is the Pod of one sandbox: labelled with its id and tenant
// (spec.SecretScope), its spec in an annotation, one container whose
// requests and limits are the VM's vCPUs and memory plus VMMOverheadMiB,
// and the node selector and toleration that bind it to worker nodes only.
// ErrInvalidArgument for a spec no Pod can carry.
func SandboxPod(spec worker.SandboxSpec, opts PodOptions) (*corev1.Pod, error) {
	name, err := PodName(spec.ID)
	if err != nil {
		return nil, err
	}
	if spec.VCPUs < 1 || spec.MemoryMiB < 1 {
		return nil, fmt.Errorf("sandbox %s: vcpus %d and memory_mib %d must be positive: %w", spec.ID, spec.VCPUs, spec.MemoryMiB, errdefs.ErrInvalidArgument)
	}
	labels := map[string]string{LabelSandbox: spec.ID}
	if spec.SecretScope != "" {
		if errs := validation.IsValidLabelValue(spec.SecretScope); len(errs) > 0 {
			return nil, fmt.Errorf("tenant %q: %s: %w", spec.SecretScope, strings.Join(errs, "; "), errdefs.ErrInvalidArgument)
		}
		labels[LabelTenant] = spec.SecretScope
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: encode spec: %w", spec.ID, err)
	}
	annotations := map[string]string{AnnotationSpec: string(raw), AnnotationTemplate: spec.Template}
	if spec.FromCheckpoint != "" {
		annotations[AnnotationRestore] = RestoreCheckpoint + "/" + spec.FromCheckpoint
	}
	if err := annotateSuspend(spec, annotations); err != nil { // suspend.go
		return nil, err
	}
	tolerate := opts.TolerationSeconds
	if tolerate == 0 {
		tolerate = DefaultTolerationSeconds
	}
	grace := opts.GraceSeconds
	if grace == 0 {
		grace = DefaultDrainGraceSeconds
	}
	size := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(spec.VCPUs), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(spec.MemoryMiB+VMMOverheadMiB)<<20, resource.BinarySI),
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: opts.Namespace, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: ContainerName, Image: ContainerImage,
				Resources: corev1.ResourceRequirements{Requests: size, Limits: size.DeepCopy()},
			}},
			// A sandbox's VM is never restarted in place: when it ends, the
			// control plane decides (fail, wake elsewhere).
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(grace),
			NodeSelector:                  map[string]string{LabelWorker: "true"},
			AutomountServiceAccountToken:  new(false),
			EnableServiceLinks:            new(false),
			Tolerations: []corev1.Toleration{
				{Key: TaintSandbox, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule},
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(tolerate)},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(tolerate)},
			},
		},
	}, nil
}

// SandboxID is the sandbox id a Pod carries ("" when it is not a sandbox Pod).
func SandboxID(pod *corev1.Pod) string { return pod.Labels[LabelSandbox] }

// SpecFromPod reads the sandbox spec a Pod carries. ErrInvalidArgument when
// the Pod is not a well-formed sandbox Pod (no or bad spec annotation, or a
// spec whose id is not the Pod's label).
func SpecFromPod(pod *corev1.Pod) (worker.SandboxSpec, error) {
	var spec worker.SandboxSpec
	raw, ok := pod.Annotations[AnnotationSpec]
	if !ok {
		return spec, fmt.Errorf("pod %s/%s has no %s annotation: %w", pod.Namespace, pod.Name, AnnotationSpec, errdefs.ErrInvalidArgument)
	}
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return spec, fmt.Errorf("pod %s/%s: %s: %v: %w", pod.Namespace, pod.Name, AnnotationSpec, err, errdefs.ErrInvalidArgument)
	}
	if spec.ID == "" || spec.ID != SandboxID(pod) {
		return spec, fmt.Errorf("pod %s/%s: spec id %q is not its %s label %q: %w", pod.Namespace, pod.Name, spec.ID, LabelSandbox, SandboxID(pod), errdefs.ErrInvalidArgument)
	}
	return specWithSuspend(pod, spec) // suspend.go
}

// PinToNode makes the Pod schedulable on the named node only (a required
// node affinity on metadata.name): a branch must start where its
// checkpoint's files are, for as long as checkpoints live on one worker.
// The scheduler still decides whether it fits there.
func PinToNode(pod *corev1.Pod, node string) {
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}},
	}}
}

// AvoidNodes keeps the Pod off the named nodes (a required node affinity
// on metadata.name, NotIn), leaving kube-scheduler every other choice: a
// Pod lost on a node whose worker died is placed again elsewhere. It adds
// to a pin's term when the Pod has one.
func AvoidNodes(pod *corev1.Pod, nodes []string) {
	if len(nodes) == 0 {
		return
	}
	req := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: slices.Clone(nodes)}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	sel := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(sel.NodeSelectorTerms) == 0 {
		sel.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	// Terms are ORed, requirements within a term ANDed: every term avoids.
	for i := range sel.NodeSelectorTerms {
		sel.NodeSelectorTerms[i].MatchFields = append(sel.NodeSelectorTerms[i].MatchFields, req)
	}
}
