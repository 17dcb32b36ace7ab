package placement_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/cluster/node"
	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
	"github.com/space-sandbox/space/internal/worker/workertest"
)

// Placement keeps the worker contract: the suite through placement → a Pod
// per sandbox on the real control plane (kuberig), bound by the scheduler
// to a node whose agent runs there → the worker protocol over loopback h2c
// (remote.Client → remote.Server) → the API tests' worker on that node.
// Each subtest has a namespace, a node and a worker of its own.
func TestConformance(t *testing.T) {
	var n int
	workertest.Run(t, workertest.Harness{
		New: func(t *testing.T) worker.Worker {
			n++
			return conformanceRig(t, fmt.Sprintf("conf%d", n))
		},
		Spec:    spec,
		Timeout: 2 * time.Minute,
	})
}

// conformanceRig starts one node that serves the API tests' worker over the
// worker protocol and returns a placement that reaches it through Pods.
func conformanceRig(t *testing.T, name string) *placement.Placement {
	t.Helper()
	f := newFleet(t, name)
	tok := conformanceToken(t)
	w := apitest.NewWorker(t)
	addr := serveWorker(t, w, tok)

	ctx, cancel := context.WithCancel(context.Background())
	a := &nodeAgent{name: "space-" + name + "-a", addr: addr, cancel: cancel, done: make(chan error, 1)}
	cfg := node.Config{NodeName: a.name, Address: addr, VCPUs: 8, MemoryMiB: 8192, Sandboxes: 16,
		Namespace: f.ns, LeaseDuration: testLease, ReadyInterval: testResync, ResyncInterval: testResync,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)), Drains: &a.drains}
	// The agent runs beside its worker, as in `spaced worker`.
	go func() { a.done <- node.Run(ctx, f.client, w, cfg) }()
	f.mu.Lock()
	f.agents[a.name] = a // f's cleanup stops it and removes the node
	f.mu.Unlock()
	f.eventually(60*time.Second, "node "+a.name+" Ready", func() (bool, string) {
		nd, err := f.client.CoreV1().Nodes().Get(context.Background(), a.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range nd.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue && !hasTaint(nd, corev1.TaintNodeNotReady), fmt.Sprintf("%s %s", c.Status, c.Message)
			}
		}
		return false, "no Ready condition"
	})

	var mu sync.Mutex
	var clients []*remote.Client
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range clients {
			c.Close()
		}
	})
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	p, err := placement.New(pctx, f.client, placement.Config{
		Namespace: f.ns, TolerationSeconds: 2, ScheduleTimeout: 60 * time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		Dial: func(addr string) (worker.Worker, error) {
			c, err := remote.NewClient(remote.ClientConfig{Address: addr, Token: tok})
			if err != nil {
				return nil, err
			}
			mu.Lock()
			clients = append(clients, c)
			mu.Unlock()
			return c, nil
		},
	})
	if err != nil {
		t.Fatalf("placement.New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.Ready(bounded(t, 30*time.Second)); err != nil {
		t.Fatalf("placement Ready: %v", err)
	}
	return p
}

// serveWorker serves w over the worker protocol on a loopback port until
// the test ends and returns the port's address.
func serveWorker(t *testing.T, w worker.Worker, tok remote.Token) string {
	t.Helper()
	srv, err := remote.NewServer(remote.ServerConfig{Worker: w, Token: tok,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = hs.Close()
		<-done
	})
	return ln.Addr().String()
}

func conformanceToken(t *testing.T) remote.Token {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	tok, err := remote.NewToken(hex.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
