// Package k8s holds what the two sides of cluster mode agree on in
// Kubernetes: the names, labels, annotations and taint of worker nodes and
// sandbox Pods, how a sandbox's spec is carried on its Pod, how a node
// advertises its worker-protocol address, and how a Pod's status reads as a
// sandbox's fate. The node side (cluster/node) and the control side
// (cluster/placement) both build on it, so neither spells a label alone.
//
// It holds no client and makes no call: pure functions over client-go's
// API types. It must not import the API, store or operation packages.
package k8s

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Labels, annotations and the taint of cluster mode.
const (
	// LabelWorker marks a node that a SPACE worker registered (value "true").
	LabelWorker = "space.dev/worker"
	// LabelSimulated marks a node whose worker simulates its sandboxes
	// (`spaced worker --simulate`; value "true"): it runs no VMs.
	LabelSimulated = "space.dev/simulated"
	// LabelSandbox carries a sandbox Pod's sandbox id.
	LabelSandbox = "space.dev/sandbox"
	// LabelTenant carries the id of the tenant that owns the sandbox.
	LabelTenant = "space.dev/tenant"

	// TaintSandbox keeps every Pod but sandbox Pods off worker nodes.
	TaintSandbox = "space.dev/sandbox"

	// AnnotationSpec holds the sandbox's worker.SandboxSpec as JSON.
	AnnotationSpec = "space.dev/spec"
	// AnnotationTemplate names the template image (and digest) the sandbox
	// starts from, for people reading Pods; the spec is what the worker uses.
	AnnotationTemplate = "space.dev/template"
	// AnnotationRestore says what the sandbox starts from besides its
	// template: RestoreCheckpoint + "/" + id for a branch, RestoreSuspend +
	// "/" + sandbox id for a wake from object storage; absent otherwise.
	AnnotationRestore = "space.dev/restore"
	// AnnotationWorkerPort is the port of the worker protocol on a worker
	// node; the host is the node's InternalIP address.
	AnnotationWorkerPort = "space.dev/worker-port"

	// ContainerName is the one container of a sandbox Pod: the sandbox's VM.
	ContainerName = "sandbox"
	// ContainerImage is what the container's image field says. Kubernetes
	// requires one; no kubelet ever pulls it (the worker boots the template).
	ContainerImage = "space.dev/sandbox-vm"
)

// Restore kinds in AnnotationRestore.
const RestoreCheckpoint = "checkpoint"

// DefaultNamespace is where sandbox Pods live unless configured otherwise.
const DefaultNamespace = "space-sandboxes"

// NodePrefix starts every worker node's name.
const NodePrefix = "space-"

// NodeName is the node name of the worker on host: "space-<host>", lower
// case. It fails with ErrInvalidArgument when the result is not a valid
// node name (a DNS subdomain).
func NodeName(host string) (string, error) {
	name := NodePrefix + strings.ToLower(host)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("node name %q: %s: %w", name, strings.Join(errs, "; "), errdefs.ErrInvalidArgument)
	}
	return name, nil
}

// PodName is the name of sandbox id's Pod: the id with "_" made "-"
// ("sbx_01h…" → "sbx-01h…"). ErrInvalidArgument when the id does not make
// a valid Pod name or label value.
func PodName(sandboxID string) (string, error) {
	name := strings.ReplaceAll(sandboxID, "_", "-")
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("sandbox id %q: %s: %w", sandboxID, strings.Join(errs, "; "), errdefs.ErrInvalidArgument)
	}
	if errs := validation.IsValidLabelValue(sandboxID); len(errs) > 0 {
		return "", fmt.Errorf("sandbox id %q: %s: %w", sandboxID, strings.Join(errs, "; "), errdefs.ErrInvalidArgument)
	}
	return name, nil
}
