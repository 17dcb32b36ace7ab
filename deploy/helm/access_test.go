package helm

import (
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// access is one request a component's ServiceAccount may or may not make.
// resource may name a subresource ("pods/status").
type access struct {
	verb, group, resource, namespace, name string
}

func (a access) String() string {
	return a.verb + " " + a.group + "/" + a.resource + " ns=" + a.namespace + " name=" + a.name
}

const (
	sandboxNS  = "space-sandboxes" // sandboxes.namespace's default
	nodeLeases = "kube-node-lease"
	nodeName   = "space-host1"
)

// need is a request a component's code makes, and where.
type need struct {
	access
	source string
}

// controlNeeds is every Kubernetes request `spaced control`'s cluster code
// makes (internal/cluster/placement, internal/cluster/leader), from the
// client-go calls there. TestComponentsUseOnlyWhatTheyNeed runs that code
// as the chart's ServiceAccount and fails on any request missing here, so
// the list follows the code.
var controlNeeds = []need{
	{access{"list", "", "pods", sandboxNS, ""}, "placement.go: the Pod informer (namespace, label space.dev/sandbox)"},
	{access{"watch", "", "pods", sandboxNS, ""}, "placement.go: the Pod informer"},
	{access{"list", "", "nodes", "", ""}, "placement.go: the Node informer (label space.dev/worker)"},
	{access{"watch", "", "nodes", "", ""}, "placement.go: the Node informer"},
	{access{"create", "", "pods", sandboxNS, ""}, "create.go: Pods.Create"},
	{access{"get", "", "pods", sandboxNS, "sbx-1"}, "create.go, delete.go: Pods.Get"},
	{access{"delete", "", "pods", sandboxNS, "sbx-1"}, "delete.go: Pods.Delete (grace, UID precondition)"},
	{access{"patch", "", "pods", sandboxNS, "sbx-1"}, "suspend.go: releasePod marks the Pod k8s.AnnotationSuspended (merge patch) before deleting it"},
	{access{"get", "coordination.k8s.io", "leases", namespace, "space-control"}, "leader.go: resourcelock.LeaseLock Get"},
	{access{"create", "coordination.k8s.io", "leases", namespace, ""}, "leader.go: LeaseLock Create (first candidate)"},
	{access{"update", "coordination.k8s.io", "leases", namespace, "space-control"}, "leader.go: LeaseLock Update (renew, release)"},
}

// workerNeeds is every request `spaced worker`'s node code makes
// (internal/cluster/node/run.go and the virtual-kubelet v1.14.1
// controllers it runs: node.go, lease_controller_v1.go, pod.go, and
// client-go's event recorder).
var workerNeeds = []need{
	{access{"create", "", "nodes", "", ""}, "vk node.go: Nodes.Create (register; run.go re-registers a deleted node)"},
	{access{"get", "", "nodes", "", nodeName}, "vk node.go: Nodes.Get before a status patch"},
	{access{"patch", "", "nodes/status", "", nodeName}, "vk node.go: Nodes.Patch(status) with capacity, conditions, addresses"},
	{access{"get", "coordination.k8s.io", "leases", nodeLeases, nodeName}, "vk lease_controller_v1.go: Leases.Get"},
	{access{"create", "coordination.k8s.io", "leases", nodeLeases, ""}, "vk lease_controller_v1.go: Leases.Create"},
	{access{"update", "coordination.k8s.io", "leases", nodeLeases, nodeName}, "vk lease_controller_v1.go: Leases.Update (heartbeat)"},
	{access{"list", "", "pods", "", ""}, "run.go: the bound-Pod informer (every namespace, spec.nodeName=<node>)"},
	{access{"watch", "", "pods", "", ""}, "run.go: the bound-Pod informer"},
	{access{"update", "", "pods/status", sandboxNS, "sbx-1"}, "vk pod.go: Pods.UpdateStatus"},
	{access{"delete", "", "pods", sandboxNS, "sbx-1"}, "vk pod.go: Pods.Delete (grace 0, finishing a deletion)"},
	{access{"patch", "", "pods", sandboxNS, "sbx-1"}, "drain.go: Pods.Patch, the drain's mark (k8s.DrainMark) on an evicted Pod"},
	{access{"create", "", "events", sandboxNS, ""}, "run.go: record.EventSinkImpl Create"},
	{access{"patch", "", "events", sandboxNS, "sbx-1.1"}, "run.go: record.EventSinkImpl Patch (a repeated event)"},
}

// escalations are what no component may do: they would let it gain rights
// it was not given (RBAC objects, impersonation, tokens, CSRs, Pods running
// as another account, Secrets, lifting the workers' admission policy).
var escalations = []access{
	{"create", "rbac.authorization.k8s.io", "roles", namespace, ""},
	{"create", "rbac.authorization.k8s.io", "rolebindings", sandboxNS, ""},
	{"create", "rbac.authorization.k8s.io", "clusterrolebindings", "", ""},
	{"update", "rbac.authorization.k8s.io", "clusterroles", "", "space-worker"},
	{"escalate", "rbac.authorization.k8s.io", "clusterroles", "", "space-worker"},
	{"bind", "rbac.authorization.k8s.io", "clusterroles", "", "cluster-admin"},
	{"impersonate", "", "users", "", "admin"},
	{"impersonate", "", "serviceaccounts", namespace, "space-control"},
	{"create", "", "serviceaccounts/token", namespace, "space-control"},
	{"create", "", "serviceaccounts/token", namespace, "space-worker"},
	{"create", "certificates.k8s.io", "certificatesigningrequests", "", ""},
	{"create", "", "pods", namespace, ""},
	{"get", "", "secrets", namespace, "space-bootstrap"},
	{"list", "", "secrets", "", ""},
	{"get", "", "secrets", sandboxNS, "x"},
	{"delete", "admissionregistration.k8s.io", "validatingadmissionpolicybindings", "", "space-workers-own-node"},
	{"update", "admissionregistration.k8s.io", "validatingadmissionpolicies", "", "space-workers-own-node"},
	{"update", "", "namespaces", "", sandboxNS},
	{"create", "", "pods/exec", sandboxNS, "sbx-1"},
	{"create", "", "pods/ephemeralcontainers", sandboxNS, "sbx-1"},
}

// controlMayNot are the control plane's limits beyond escalations: it
// cannot change nodes, reach Pods outside the sandbox namespace, write
// Pod status (the workers' part) or take a worker's Lease.
var controlMayNot = []access{
	{"update", "", "nodes", "", nodeName}, {"patch", "", "nodes", "", nodeName},
	{"patch", "", "nodes/status", "", nodeName}, {"delete", "", "nodes", "", nodeName}, {"create", "", "nodes", "", ""},
	{"create", "", "pods", "default", ""}, {"list", "", "pods", "", ""},
	{"update", "", "pods", sandboxNS, "sbx-1"}, {"update", "", "pods/status", sandboxNS, "sbx-1"},
	{"update", "coordination.k8s.io", "leases", namespace, "someone-else"},
	{"update", "coordination.k8s.io", "leases", nodeLeases, nodeName},
	{"create", "", "configmaps", namespace, ""},
}

// workerMayNot are the worker's limits beyond escalations: it cannot
// create Pods or update them (a patch is allowed, and the admission policy
// lets it change only a drain's mark: checkDrainMarkOnly), delete nodes,
// change another node's labels or taints through an update, or read
// ConfigMaps and Secrets (virtual-kubelet's informers for them are never
// started).
var workerMayNot = []access{
	{"create", "", "pods", sandboxNS, ""}, {"create", "", "pods", "", ""},
	{"update", "", "pods", sandboxNS, "sbx-1"},
	{"create", "", "pods/eviction", sandboxNS, "sbx-1"},
	{"delete", "", "nodes", "", nodeName}, {"update", "", "nodes", "", "space-other"}, {"patch", "", "nodes", "", "space-other"},
	{"get", "", "configmaps", sandboxNS, "x"}, {"list", "", "configmaps", "", ""}, {"list", "", "services", "", ""},
	{"update", "coordination.k8s.io", "leases", namespace, "space-control"},
	{"delete", "coordination.k8s.io", "leases", nodeLeases, nodeName},
}

// componentAccess is, per ServiceAccount of the default release, what it
// must be allowed and what it must be denied.
func componentAccess() []struct {
	sa     string
	may    []access
	mayNot []access
} {
	accesses := func(ns []need) []access {
		out := make([]access, len(ns))
		for i, n := range ns {
			out[i] = n.access
		}
		return out
	}
	return []struct {
		sa     string
		may    []access
		mayNot []access
	}{
		{"space-control", accesses(controlNeeds), append(append([]access(nil), escalations...), controlMayNot...)},
		{"space-worker", accesses(workerNeeds), append(append([]access(nil), escalations...), workerMayNot...)},
	}
}

// TestSubjectAccessReviews asks the rig's real authorizer (RBAC on the
// applied chart), through SubjectAccessReviews, whether each
// ServiceAccount may make each request its code makes (allowed) and each
// request beyond it (denied).
func TestSubjectAccessReviews(t *testing.T) {
	a := applyRelease(t, release, namespace, required())
	reviews := a.rig.Client.AuthorizationV1().SubjectAccessReviews()
	for _, tc := range componentAccess() {
		t.Run(tc.sa, func(t *testing.T) {
			ctx := bounded(t, time.Minute)
			ask := func(x access) bool {
				t.Helper()
				resource, sub, _ := strings.Cut(x.resource, "/")
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User:   "system:serviceaccount:" + namespace + ":" + tc.sa,
					Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Verb: x.verb, Group: x.group, Resource: resource, Subresource: sub, Namespace: x.namespace, Name: x.name,
					},
				}}
				res, err := reviews.Create(ctx, sar, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("subject access review %v: %v", x, err)
				}
				return res.Status.Allowed
			}
			for _, x := range tc.may {
				if !ask(x) {
					t.Errorf("%s is denied %v; its code needs it", tc.sa, x)
				}
			}
			for _, x := range tc.mayNot {
				if ask(x) {
					t.Errorf("%s is allowed %v; it must not be", tc.sa, x)
				}
			}
			t.Logf("%s: %d requests allowed, %d denied, as they must be", tc.sa, len(tc.may), len(tc.mayNot))
		})
	}
}
