package helm

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// access is one request a component's ServiceAccount may or may not make.
type access struct {
	verb, group, resource, namespace, name string
}

// TestRBAC evaluates the rendered Roles, ClusterRoles and bindings the
// way the RBAC authorizer does (union of the rules bound to the
// ServiceAccount, "" namespace = cluster scope), for what each component
// needs and for what it must not be able to do.
func TestRBAC(t *testing.T) {
	objs := mustRender(t, required())
	const sandboxes, leases = "space-sandboxes", "kube-node-lease"
	for _, tc := range []struct {
		sa     string
		may    []access
		mayNot []access
	}{
		{
			sa: "space-control",
			may: []access{
				{"create", "", "pods", sandboxes, ""}, {"delete", "", "pods", sandboxes, "sbx-1"},
				{"watch", "", "pods", sandboxes, ""}, {"list", "", "pods", sandboxes, ""}, {"get", "", "pods", sandboxes, "sbx-1"},
				{"get", "", "nodes", "", "space-host1"}, {"list", "", "nodes", "", ""}, {"watch", "", "nodes", "", ""},
				{"create", "coordination.k8s.io", "leases", namespace, ""},
				{"update", "coordination.k8s.io", "leases", namespace, "space-control"},
				{"create", "", "events", sandboxes, ""},
			},
			mayNot: []access{
				{"update", "", "nodes", "", "space-host1"}, {"patch", "", "nodes", "", "space-host1"},
				{"patch", "", "nodes/status", "", "space-host1"}, {"delete", "", "nodes", "", "space-host1"},
				{"create", "", "pods", "default", ""}, {"create", "", "pods", namespace, ""},
				{"list", "", "pods", "", ""}, {"get", "", "secrets", sandboxes, "x"}, {"list", "", "secrets", namespace, ""},
				{"update", "coordination.k8s.io", "leases", namespace, "someone-else"},
				{"update", "coordination.k8s.io", "leases", leases, "space-host1"},
				{"create", "", "pods/exec", sandboxes, ""}, {"update", "", "pods/status", sandboxes, "sbx-1"},
			},
		},
		{
			sa: "space-worker",
			may: []access{
				{"create", "", "nodes", "", ""}, {"get", "", "nodes", "", "space-host1"},
				{"update", "", "nodes", "", "space-host1"}, {"patch", "", "nodes/status", "", "space-host1"},
				{"get", "coordination.k8s.io", "leases", leases, "space-host1"},
				{"create", "coordination.k8s.io", "leases", leases, ""}, {"update", "coordination.k8s.io", "leases", leases, "space-host1"},
				{"list", "", "pods", "", ""}, {"watch", "", "pods", "", ""}, {"get", "", "pods", sandboxes, "sbx-1"},
				{"patch", "", "pods/status", sandboxes, "sbx-1"}, {"update", "", "pods/status", sandboxes, "sbx-1"},
				{"delete", "", "pods", sandboxes, "sbx-1"}, {"create", "", "events", sandboxes, ""},
			},
			mayNot: []access{
				{"create", "", "pods", sandboxes, ""}, {"create", "", "pods", "", ""}, {"update", "", "pods", sandboxes, "sbx-1"},
				{"delete", "", "nodes", "", "space-host1"}, {"get", "", "secrets", sandboxes, "x"}, {"list", "", "secrets", "", ""},
				{"get", "", "configmaps", sandboxes, "x"}, {"create", "", "pods/exec", sandboxes, ""},
				{"update", "coordination.k8s.io", "leases", namespace, "space-control"},
				{"create", "", "serviceaccounts/token", namespace, "space-control"},
			},
		},
	} {
		t.Run(tc.sa, func(t *testing.T) {
			rules := boundRules(objs, namespace, tc.sa)
			if len(rules) == 0 {
				t.Fatalf("no rules bound to %s", tc.sa)
			}
			for _, a := range tc.may {
				if !allowed(rules, a) {
					t.Errorf("%s cannot %v; its component needs it", tc.sa, a)
				}
			}
			for _, a := range tc.mayNot {
				if allowed(rules, a) {
					t.Errorf("%s can %v; it must not", tc.sa, a)
				}
			}
		})
	}
}

// scopedRule is a rule and the namespace it holds in ("" = every one).
type scopedRule struct {
	namespace string
	rule      rbacv1.PolicyRule
}

func boundRules(objs objects, saNamespace, sa string) []scopedRule {
	isSubject := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == saNamespace
		})
	}
	roles := map[string][]rbacv1.PolicyRule{}
	for _, r := range all[*rbacv1.Role](objs) {
		roles["Role/"+r.Namespace+"/"+r.Name] = r.Rules
	}
	for _, r := range all[*rbacv1.ClusterRole](objs) {
		roles["ClusterRole//"+r.Name] = r.Rules
	}
	var out []scopedRule
	for _, b := range all[*rbacv1.RoleBinding](objs) {
		if !isSubject(b.Subjects) {
			continue
		}
		key := b.RoleRef.Kind + "/" + b.Namespace + "/" + b.RoleRef.Name
		if b.RoleRef.Kind == "ClusterRole" {
			key = "ClusterRole//" + b.RoleRef.Name
		}
		for _, r := range roles[key] {
			out = append(out, scopedRule{b.Namespace, r})
		}
	}
	for _, b := range all[*rbacv1.ClusterRoleBinding](objs) {
		if isSubject(b.Subjects) {
			for _, r := range roles["ClusterRole//"+b.RoleRef.Name] {
				out = append(out, scopedRule{"", r})
			}
		}
	}
	return out
}

func allowed(rules []scopedRule, a access) bool {
	match := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	for _, sr := range rules {
		r := sr.rule
		if sr.namespace != "" && sr.namespace != a.namespace {
			continue
		}
		if !match(r.Verbs, a.verb) || !match(r.APIGroups, a.group) || !match(r.Resources, a.resource) {
			continue
		}
		// resourceNames never match a request without a name (create, list, watch).
		if len(r.ResourceNames) > 0 && (a.name == "" || !slices.Contains(r.ResourceNames, a.name)) {
			continue
		}
		return true
	}
	return false
}
