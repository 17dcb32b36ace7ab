package kuberig_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// A ServiceAccount token authenticates as that account, and RBAC lets it do
// exactly what a Role grants: reading pods in its namespace, nothing else.
func TestServiceAccountTokenAuthenticatesAndRBACDenies(t *testing.T) {
	c := rig(t)
	ctx := context.Background()
	const ns = "space-auth"
	if err := c.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := c.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reader-reads-pods", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "reader", Namespace: ns}},
	}
	if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	cfg, err := c.ServiceAccountConfig(ctx, ns, "reader")
	if err != nil {
		t.Fatal(err)
	}
	reader := kubernetes.NewForConfigOrDie(cfg)
	review, err := reader.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review: %v", err)
	}
	const user = "system:serviceaccount:" + ns + ":reader"
	if got := review.Status.UserInfo.Username; got != user {
		t.Errorf("token authenticates as %q, want %q", got, user)
	}
	if _, err := reader.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("granted list pods: %v", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	if _, err := reader.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("create pod without a grant: err = %v, want Forbidden", err)
	}
	if _, err := reader.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list nodes without a grant: err = %v, want Forbidden", err)
	}

	for _, tc := range []struct {
		verb, resource, namespace string
		allowed                   bool
	}{
		{"list", "pods", ns, true},
		{"create", "pods", ns, false},
		{"list", "pods", "default", false},
		{"patch", "nodes", "", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: tc.verb, Resource: tc.resource, Namespace: tc.namespace},
		}}
		got, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("subject access review: %v", err)
		}
		if got.Status.Allowed != tc.allowed {
			t.Errorf("%s %s in %q: allowed = %v, want %v (%s)", tc.verb, tc.resource, tc.namespace, got.Status.Allowed, tc.allowed, got.Status.Reason)
		}
	}

	forged := rest.CopyConfig(cfg)
	forged.BearerToken = cfg.BearerToken[:len(cfg.BearerToken)-4] + "AAAA"
	if _, err := kubernetes.NewForConfigOrDie(forged).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("forged token: err = %v, want Unauthorized", err)
	}
}

// The kubeconfigs the rig writes work for any client: client-go loads the
// ServiceAccount's, and kubectl (Debian's kubernetes-client, or whatever
// kubectl the host has) reads the admin's.
func TestKubeconfigsWorkWithKubectlAndClientGo(t *testing.T) {
	c := rig(t)
	ctx := context.Background()
	path, err := c.ServiceAccountKubeconfig(ctx, "default", "kubeconfig-check")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("service account kubeconfig: %v", err)
	}
	if got, want := review.Status.UserInfo.Username, "system:serviceaccount:default:kubeconfig-check"; got != want {
		t.Errorf("service account kubeconfig authenticates as %q, want %q", got, want)
	}

	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl not found (make setup installs Debian's kubernetes-client): %v", err)
	}
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", c.Kubeconfig, "--request-timeout=20s", "get", "namespaces", "-o", "name")
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get namespaces: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "namespace/kube-system") {
		t.Errorf("kubectl get namespaces printed %q, want namespace/kube-system among them", out)
	}
}
