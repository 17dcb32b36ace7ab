package placement_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/space-sandbox/space/internal/cluster/node"
	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/testenv/kuberig"
	"github.com/space-sandbox/space/internal/worker"
)

func TestMain(m *testing.M) {
	code := m.Run()
	kuberig.StopShared(code != 0)
	os.Exit(code)
}

// fleet is a test's worker nodes: node agents in this process, each with
// its own testWorker, on the shared real control plane. Tests run one at a
// time (all worker nodes take every sandbox Pod), each in its own
// namespace with its own node names, and remove their nodes at the end.
type fleet struct {
	t        *testing.T
	client   kubernetes.Interface
	ns       string
	prefix   string
	mu       sync.Mutex
	byAddr   map[string]*testWorker
	agents   map[string]*nodeAgent
	nextPort int
	roam     *roamStore // given to the workers of nodes added after it is set
	// drainBound is the drain concurrency of nodes started after it is
	// set (the node's default when 0).
	drainBound int
}

type nodeAgent struct {
	name, addr string
	w          *testWorker
	drains     node.DrainRecord // the node's own record of drain suspends
	cancel     context.CancelFunc
	done       chan error
}

// Node agent timings short enough for tests; the rig's controller manager
// calls a node NotReady after 8s without a Lease renewal.
const (
	testLease  = 4 * time.Second
	testResync = 300 * time.Millisecond
)

func newFleet(t *testing.T, name string) *fleet {
	c := kuberig.Shared(t, kuberig.Options{})
	f := &fleet{t: t, client: c.Client, ns: "sbx-" + name, prefix: name, byAddr: map[string]*testWorker{},
		agents: map[string]*nodeAgent{}, nextPort: 20000}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(f.cleanup)
	return f
}

// addNode starts a node agent offering vcpus, memory and sandboxes, with
// a new testWorker, and waits for its node to be Ready.
func (f *fleet) addNode(suffix string, vcpus, memMiB, sandboxes int) *nodeAgent {
	f.t.Helper()
	f.mu.Lock()
	f.nextPort++
	addr := fmt.Sprintf("127.0.0.1:%d", f.nextPort)
	w := newTestWorker()
	w.roam = f.roam
	f.byAddr[addr] = w
	f.mu.Unlock()
	a := &nodeAgent{name: "space-" + f.prefix + "-" + suffix, addr: addr, w: w}
	f.start(a, vcpus, memMiB, sandboxes)
	return a
}

// start runs (or runs again) a's node agent and waits for its node to be Ready.
func (f *fleet) start(a *nodeAgent, vcpus, memMiB, sandboxes int) {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel, a.done = cancel, make(chan error, 1)
	cfg := node.Config{NodeName: a.name, Address: a.addr, VCPUs: vcpus, MemoryMiB: memMiB, Sandboxes: sandboxes,
		Namespace: f.ns, LeaseDuration: testLease, ReadyInterval: testResync, ResyncInterval: testResync,
		Logger:           slog.New(slog.NewTextHandler(testWriter{f.t}, nil)),
		DrainConcurrency: f.drainBound, ObjectStore: a.w.roam != nil, Drains: &a.drains}
	go func() { a.done <- node.Run(ctx, f.client, a.w, cfg) }()
	f.mu.Lock()
	f.agents[a.name] = a
	f.mu.Unlock()
	f.eventually(60*time.Second, "node "+a.name+" Ready", func() (bool, string) {
		n, err := f.client.CoreV1().Nodes().Get(context.Background(), a.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue && !hasTaint(n, corev1.TaintNodeNotReady), fmt.Sprintf("%s %s taints %v", c.Status, c.Message, n.Spec.Taints)
			}
		}
		return false, "no Ready condition"
	})
}

// stop ends a's node agent (its Lease is no longer renewed), bounded.
func (f *fleet) stop(a *nodeAgent) {
	f.t.Helper()
	a.cancel()
	select {
	case err := <-a.done:
		if err != nil {
			f.t.Errorf("node agent %s: %v", a.name, err)
		}
	case <-time.After(30 * time.Second):
		f.t.Fatalf("node agent %s did not stop in 30s", a.name)
	}
	a.done = nil
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// dial finds the testWorker of an address: the worker protocol's place in
// these tests.
func (f *fleet) dial(addr string) (worker.Worker, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.byAddr[addr]
	if !ok {
		return nil, errdefs.New(errdefs.ErrUnavailable, "nothing listens at %s", addr)
	}
	return w, nil
}

// placement starts the control side on this fleet's namespace.
func (f *fleet) placement(cfg placement.Config) *placement.Placement {
	f.t.Helper()
	cfg.Namespace, cfg.Dial = f.ns, f.dial
	if cfg.TolerationSeconds == 0 {
		cfg.TolerationSeconds = 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{f.t}, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := placement.New(ctx, f.client, cfg)
	if err != nil {
		f.t.Fatalf("placement.New: %v", err)
	}
	f.t.Cleanup(func() { p.Close() })
	return p
}

// cleanup stops the agents and removes the namespace and the nodes, so
// the next test's Pods see only its own nodes.
func (f *fleet) cleanup() {
	f.mu.Lock()
	agents := f.agents
	f.mu.Unlock()
	for _, a := range agents {
		if a.done != nil {
			f.stop(a)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name := range agents {
		if err := f.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			f.t.Errorf("delete node %s: %v", name, err)
		}
		_ = f.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
	}
	if err := f.client.CoreV1().Namespaces().Delete(ctx, f.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		f.t.Errorf("delete namespace %s: %v", f.ns, err)
	}
}

// eventually waits, at most timeout, for cond (testenv.Eventually); it
// fails the test with cond's last word otherwise.
func (f *fleet) eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	f.t.Helper()
	testenv.Eventually(f.t, timeout, func() error {
		if ok, why := cond(); !ok {
			return fmt.Errorf("%s: %s", what, why)
		}
		return nil
	})
}

// testWriter sends logs to t.Log while the test runs.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
