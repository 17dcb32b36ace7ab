package helm

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestRBAC evaluates the rendered Roles, ClusterRoles and bindings the
// way the RBAC authorizer does (union of the rules bound to the
// ServiceAccount, "" namespace = cluster scope), for what each component
// needs and for what it must not be able to do (componentAccess); without
// an API server, so a render-only run (go test -run TestRBAC) sees a rule
// gone wrong. TestSubjectAccessReviews asks the real authorizer the same.
func TestRBAC(t *testing.T) {
	objs := mustRender(t, required())
	for _, tc := range componentAccess() {
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
