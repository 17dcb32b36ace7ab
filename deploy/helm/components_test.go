package helm

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/space-sandbox/space/internal/cluster/leader"
	"github.com/space-sandbox/space/internal/cluster/node"
	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/testenv/kuberig"
	"github.com/space-sandbox/space/internal/worker"
)

// TestComponentsUseOnlyWhatTheyNeed runs the cluster code of both
// components on the rig as the chart's ServiceAccounts, with the chart's
// RBAC and its ValidatingAdmissionPolicy in force: a worker node
// (internal/cluster/node, with a token bound to a worker Pod on host
// "host1", as a DaemonSet Pod's is), the control plane's placement and
// leader election. A sandbox is created through the scheduler, runs on the
// worker's node and is deleted; the control plane leads on its Lease. Every
// request each makes is recorded: none may be refused, and each must be in
// controlNeeds or workerNeeds, so those lists (and the SubjectAccessReviews
// and RBAC checks on them) follow the code.
func TestComponentsUseOnlyWhatTheyNeed(t *testing.T) {
	a := applyRelease(t, release, namespace, required())
	ctx := bounded(t, 3*time.Minute)
	host := workerHost(t, a.rig)
	defer cleanupNode(t, a.rig)
	waitPolicyInForce(t, a.rig)

	workerLog, controlLog := &requestLog{}, &requestLog{}
	// Refusals are reported even when a step fails on them first.
	defer checkRefused(t, "space-control", controlLog)
	defer checkRefused(t, "space-worker", workerLog)
	workerClient := kubernetes.NewForConfigOrDie(tokenConfig(a.rig, host.token, workerLog))
	snaps := newMemSnapshots()
	w := newMemWorker(snaps)
	nodeCtx, stopNode := context.WithCancel(ctx)
	nodeDone := make(chan error, 1)
	go func() {
		nodeDone <- node.Run(nodeCtx, workerClient, w, node.Config{NodeName: nodeName, Address: "127.0.0.1:7070",
			VCPUs: 4, MemoryMiB: 4096, Sandboxes: 4, Namespace: sandboxNS, LeaseDuration: 4 * time.Second, StatusInterval: time.Second,
			ReadyInterval: 300 * time.Millisecond, ResyncInterval: 300 * time.Millisecond, ObjectStore: true, Logger: testLogger(t)})
	}()
	// stopWorker ends the node agent, once, bounded.
	stopWorker := sync.OnceFunc(func() {
		stopNode()
		select {
		case err := <-nodeDone:
			if err != nil {
				t.Errorf("worker node: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("worker node did not stop in 30s")
		}
	})
	defer stopWorker()
	testenv.Eventually(t, 60*time.Second, func() error { return nodeReady(ctx, a.rig.Client) })
	checkOwnNodeOnly(t, a.rig, host.token)

	controlToken, err := token(ctx, a.rig, "space-control", nil)
	if err != nil {
		t.Fatal(err)
	}
	controlClient := kubernetes.NewForConfigOrDie(tokenConfig(a.rig, controlToken, controlLog))
	p, err := placement.New(ctx, controlClient, placement.Config{Namespace: sandboxNS, TolerationSeconds: 2, Logger: testLogger(t), Snapshots: snaps,
		Dial: func(addr string) (worker.Worker, error) {
			if addr != "127.0.0.1:7070" {
				return nil, errdefs.New(errdefs.ErrUnavailable, "nothing listens at %s", addr)
			}
			return w, nil
		}})
	if err != nil {
		t.Fatalf("placement as space-control: %v", err)
	}
	defer p.Close()
	spec := worker.SandboxSpec{ID: "sbx_rbac", Template: "base", VCPUs: 1, MemoryMiB: 256, Hostname: "sbx-rbac", SecretScope: "ten_test"}
	st, err := p.CreateSandbox(bounded(t, 90*time.Second), spec)
	if err != nil {
		t.Fatalf("create a sandbox as space-control on a worker running as space-worker: %v", err)
	}
	if st.State != worker.VMRunning || !w.has(spec.ID) {
		t.Fatalf("sandbox %+v; on the worker: %v", st, w.has(spec.ID))
	}
	// Suspend to object storage ends the Pod; a wake makes a new one.
	if st, err := p.SuspendSandbox(bounded(t, 60*time.Second), spec.ID); err != nil || st.State != worker.VMSuspended {
		t.Fatalf("suspend the sandbox: %+v, %v", st, err)
	}
	if st, err := p.WakeSandbox(bounded(t, 90*time.Second), spec.ID); err != nil || st.State != worker.VMRunning {
		t.Fatalf("wake the sandbox: %+v, %v", st, err)
	}
	checkDrainMarkOnly(t, workerClient, spec.ID) // drain_access_test.go
	// A node drain's eviction: the worker suspends the sandbox and marks
	// its Pod (pods patch, through the admission policy) before it goes.
	drainOnce(t, a.rig.Client, p, spec.ID)
	if st, err := p.WakeSandbox(bounded(t, 90*time.Second), spec.ID); err != nil || st.State != worker.VMRunning {
		t.Fatalf("wake the drained sandbox: %+v, %v", st, err)
	}
	if err := p.DeleteSandbox(bounded(t, 60*time.Second), spec.ID); err != nil {
		t.Fatalf("delete the sandbox: %v", err)
	}
	if w.has(spec.ID) {
		t.Error("the worker still has the deleted sandbox")
	}

	leadCtx, stopLeading := context.WithCancel(ctx)
	led := make(chan struct{})
	err = leader.RunAsLeader(leadCtx, leader.Config{Client: controlClient, Namespace: namespace, Name: "space-control",
		Identity: "control-test", LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		Logger: testLogger(t)}, func(leading context.Context) {
		close(led)
		stopLeading()
		<-leading.Done()
	})
	stopLeading()
	if err != nil {
		t.Fatalf("leader election as space-control: %v", err)
	}
	select {
	case <-led:
	default:
		t.Fatal("space-control never led")
	}

	stopWorker()
	checkRequests(t, "space-control", controlLog, controlNeeds)
	checkRequests(t, "space-worker", workerLog, workerNeeds)
}

// waitPolicyInForce waits until the API server enforces the chart's
// admission policy (it loads new policies asynchronously), probing with a
// dry-run create by a worker token that names no node.
func waitPolicyInForce(t *testing.T, rig *kuberig.Cluster) {
	t.Helper()
	ctx := bounded(t, time.Minute)
	unbound, err := token(ctx, rig, "space-worker", nil)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(tokenConfig(rig, unbound, &requestLog{}))
	testenv.Eventually(t, 45*time.Second, func() error {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "space-probe", Namespace: nodeLeases}}
		_, err := client.CoordinationV1().Leases(nodeLeases).Create(ctx, lease, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), "names no node") {
			return fmt.Errorf("the workers' admission policy is not in force yet (dry-run create: %v)", err)
		}
		return nil
	})
}

// checkOwnNodeOnly shows the chart's admission policy at work beside
// RBAC: the worker's token bound to host1's Pod may not write another
// node's Lease or Node, and a worker token that names no node (not bound
// to a Pod on a node) may write none at all.
func checkOwnNodeOnly(t *testing.T, rig *kuberig.Cluster, boundToken string) {
	t.Helper()
	ctx := bounded(t, 30*time.Second)
	unbound, err := token(ctx, rig, "space-worker", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ who, tok, lease, want string }{
		{"host1's worker", boundToken, "space-other", "only its own node lease"},
		{"a token naming no node", unbound, nodeName, "names no node"},
	} {
		client := kubernetes.NewForConfigOrDie(tokenConfig(rig, tc.tok, &requestLog{}))
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: tc.lease, Namespace: nodeLeases}}
		_, err := client.CoordinationV1().Leases(nodeLeases).Create(ctx, lease, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s creating Lease %s: %v, want the admission policy's refusal (%q)", tc.who, tc.lease, err, tc.want)
		}
		other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "space-other"}}
		if _, err := client.CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); err == nil {
			_ = rig.Client.CoreV1().Nodes().Delete(ctx, other.Name, metav1.DeleteOptions{})
			t.Errorf("%s registered node space-other", tc.who)
		}
	}
}

// checkRefused fails on any request in log the API server refused.
func checkRefused(t *testing.T, sa string, log *requestLog) {
	t.Helper()
	seen := map[request]bool{}
	for _, r := range log.all() {
		if (r.status == http.StatusForbidden || r.status == http.StatusUnauthorized) && !seen[r] {
			seen[r] = true
			t.Errorf("%s was refused (%d) %v: the chart does not grant what its code needs", sa, r.status, r.access)
		}
	}
}

// checkRequests fails on any request in log the needs list lacks (verb,
// group, resource and namespace; names vary).
func checkRequests(t *testing.T, sa string, log *requestLog, needs []need) {
	t.Helper()
	made := log.all()
	if len(made) == 0 {
		t.Fatalf("%s made no request", sa)
	}
	used := map[int]bool{}
	for _, r := range made {
		i := slices.IndexFunc(needs, func(n need) bool {
			return n.verb == r.verb && n.group == r.group && n.resource == r.resource && n.namespace == r.namespace
		})
		if i < 0 {
			t.Errorf("%s's code made %v (status %d), which its needs list lacks: add it, with its source, and to the chart if it is right", sa, r.access, r.status)
			continue
		}
		used[i] = true
	}
	for i, n := range needs {
		if !used[i] {
			t.Logf("%s: %v (%s) not exercised in this run", sa, n.access, n.source)
		}
	}
	t.Logf("%s: %d requests, %d kinds of %d listed", sa, len(made), len(used), len(needs))
}

// host is a worker Pod's place: the Node of the host and the worker
// ServiceAccount's token bound to the Pod, which names that node.
type host struct{ token string }

// workerHost registers Node "host1" (tainted so nothing else lands there)
// and a Pod of the worker ServiceAccount bound to it, as the DaemonSet
// makes, and returns a token bound to that Pod: the API server puts the
// node's name in it, which the chart's admission policy checks.
func workerHost(t *testing.T, rig *kuberig.Cluster) host {
	t.Helper()
	ctx := bounded(t, time.Minute)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "host1"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "space.dev/test-host", Value: "true", Effect: corev1.TaintEffectNoSchedule}}}}
	if _, err := rig.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register host1: %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-host1", Namespace: namespace},
		Spec: corev1.PodSpec{NodeName: "host1", ServiceAccountName: "space-worker",
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: "worker", Image: "localhost/space-worker:test"}}},
	}
	made, err := rig.Client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("worker pod: %v", err)
	}
	tok, err := token(ctx, rig, "space-worker", made)
	if err != nil {
		t.Fatal(err)
	}
	return host{token: tok}
}

// token requests a token of ServiceAccount sa in the release namespace,
// bound to pod when given.
func token(ctx context.Context, rig *kuberig.Cluster, sa string, pod *corev1.Pod) (string, error) {
	seconds := int64(3600)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := rig.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s: %w", sa, err)
	}
	return tr.Status.Token, nil
}

func cleanupNode(t *testing.T, rig *kuberig.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	_ = rig.Client.CoreV1().Pods(namespace).Delete(ctx, "worker-host1", metav1.DeleteOptions{GracePeriodSeconds: &zero})
	for _, n := range []string{nodeName, "host1", "space-other"} {
		_ = rig.Client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
	}
	for _, l := range []string{nodeName, "space-other"} {
		_ = rig.Client.CoordinationV1().Leases(nodeLeases).Delete(ctx, l, metav1.DeleteOptions{})
	}
}

func nodeReady(ctx context.Context, client kubernetes.Interface) error {
	n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			for _, taint := range n.Spec.Taints {
				if taint.Key == corev1.TaintNodeNotReady {
					return fmt.Errorf("node %s still tainted %s", nodeName, taint.Key)
				}
			}
			return nil
		}
	}
	return fmt.Errorf("node %s not Ready: %v", nodeName, n.Status.Conditions)
}

// tokenConfig is a client configuration for the rig that authenticates
// with token only and records every request in log.
func tokenConfig(rig *kuberig.Cluster, token string, log *requestLog) *rest.Config {
	cfg := rest.AnonymousClientConfig(rig.Config)
	cfg.BearerToken = token
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return recorder{rt, log} }
	return cfg
}

// request is one API request and its answer.
type request struct {
	access
	status int
}

type requestLog struct {
	mu   sync.Mutex
	reqs []request
}

func (l *requestLog) add(r request) {
	l.mu.Lock()
	l.reqs = append(l.reqs, r)
	l.mu.Unlock()
}

func (l *requestLog) all() []request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]request(nil), l.reqs...)
}

type recorder struct {
	next http.RoundTripper
	log  *requestLog
}

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	a, ok := parseRequest(req)
	if !ok || err != nil {
		return resp, err
	}
	r.log.add(request{access: a, status: resp.StatusCode})
	return resp, nil
}

// parseRequest reads the verb, group, resource, namespace and name of an
// API request from its method and path, as the API server's request info
// does for resource requests; ok is false for others (discovery).
func parseRequest(req *http.Request) (a access, ok bool) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		a.group, parts = parts[1], parts[3:]
	default:
		return a, false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		a.namespace, parts = parts[1], parts[2:]
	}
	a.resource = parts[0]
	if len(parts) > 1 {
		a.name = parts[1]
	}
	if len(parts) > 2 {
		a.resource += "/" + parts[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case a.name != "":
			a.verb = "get"
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			a.verb = "watch"
		default:
			a.verb = "list"
		}
	case http.MethodPost:
		a.verb = "create"
	case http.MethodPut:
		a.verb = "update"
	case http.MethodPatch:
		a.verb = "patch"
	case http.MethodDelete:
		a.verb = "delete"
		if a.name == "" {
			a.verb = "deletecollection"
		}
	default:
		return a, false
	}
	return a, true
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
