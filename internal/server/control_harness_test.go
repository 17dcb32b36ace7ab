package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/cluster/node"
	"github.com/space-sandbox/space/internal/store/postgres"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/testenv/kuberig"
	"github.com/space-sandbox/space/internal/testenv/pgtest"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// controlCluster is a cluster in this process: the shared real Kubernetes
// control plane (kuberig), a PostgreSQL database of its own (pgtest),
// worker nodes (node agents over the worker protocol, each serving the API
// tests' worker: real agents in test mode, no VMs) and control replicas
// (RunControl), each reaching the database through a proxy the test can
// cut, which is how a replica dies here without a word to anyone.
type controlCluster struct {
	t        *testing.T
	rig      *kuberig.Cluster
	ns       string
	dsn      string
	token    remote.Token
	tokenF   string
	adminF   string
	adminKey string
	logs     *syncBuffer
}

// Timings short enough for tests. The rig calls a node NotReady after 8s
// without a Lease renewal.
const (
	testNodeLease   = 4 * time.Second
	testResync      = 300 * time.Millisecond
	testOpLease     = 3 * time.Second
	testLeaderLease = 3 * time.Second
	// testScheduleLimit is longer than a gated create waits in
	// StartLeavesLiveOperations (a replica's start and a lease period).
	testScheduleLimit = 15 * time.Second
)

func newControlCluster(t *testing.T) *controlCluster {
	t.Helper()
	rig := kuberig.Shared(t, kuberig.Options{})
	dir := t.TempDir()
	c := &controlCluster{t: t, rig: rig, ns: "ctl-" + randomHex(t, 4), dsn: pgtest.DSN(t),
		tokenF: filepath.Join(dir, "worker.token"), adminF: filepath.Join(dir, "admin.key"), logs: &syncBuffer{}}
	tok := randomHex(t, 24)
	if err := os.WriteFile(c.tokenF, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if c.token, err = remote.LoadToken(c.tokenF); err != nil {
		t.Fatal(err)
	}
	c.adminKey = "space_" + randomHex(t, 24)
	if err := os.WriteFile(c.adminF, []byte(c.adminKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rig.Namespace(ctx, c.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := rig.Client.CoreV1().Namespaces().Delete(ctx, c.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", c.ns, err)
		}
		if t.Failed() {
			t.Logf("cluster logs (last 64 KiB):\n%s", c.logs.tail(64<<10))
		}
	})
	// The template every create names, as the API tests record it.
	db, err := postgres.Open(ctx, c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	apitest.RegisterBaseTemplate(t, db)
	db.Close()
	return c
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func (c *controlCluster) logger(who string) *slog.Logger {
	return slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("who", who)
}

// testNode is one worker node: a node agent and the worker protocol in
// front of an apitest worker.
type testNode struct {
	name, addr string
	w          *apitest.Worker
}

// addNode starts a worker node offering 4 vCPUs, 4 GiB and 8 sandboxes and
// waits for it to be Ready; the test's end removes it.
func (c *controlCluster) addNode(suffix string) *testNode { return c.addNodeServing(suffix, nil) }

// addNodeServing is addNode with the worker protocol serving wrap(worker)
// when wrap is set (the node agent drives the worker itself).
func (c *controlCluster) addNodeServing(suffix string, wrap func(worker.Worker) worker.Worker) *testNode {
	t := c.t
	t.Helper()
	n := &testNode{name: "space-" + c.ns + "-" + suffix, w: apitest.NewWorker(t)}
	var served worker.Worker = n.w
	if wrap != nil {
		served = wrap(n.w)
	}
	srv, err := remote.NewServer(remote.ServerConfig{Worker: served, Token: c.token, Logger: c.logger(n.name)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.addr = ln.Addr().String()
	hs := srv.HTTPServer(nil)
	go hs.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := node.Config{NodeName: n.name, Address: n.addr, VCPUs: 4, MemoryMiB: 4096, Sandboxes: 8, Namespace: c.ns,
		LeaseDuration: testNodeLease, ReadyInterval: testResync, ResyncInterval: testResync, Logger: c.logger(n.name)}
	go func() { done <- node.Run(ctx, c.rig.Client, n.w, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("node agent %s: %v", n.name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("node agent %s did not stop in 30s", n.name)
		}
		srv.Close()
		hs.Close()
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		if err := c.rig.Client.CoreV1().Nodes().Delete(dctx, n.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete node %s: %v", n.name, err)
		}
		_ = c.rig.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(dctx, n.name, metav1.DeleteOptions{})
	})
	testenv.Eventually(t, 60*time.Second, func() error {
		nd, err := c.rig.Client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !k8s.NodeReady(nd) {
			return fmt.Errorf("node %s not Ready", n.name)
		}
		for _, taint := range nd.Spec.Taints {
			if taint.Key == corev1.TaintNodeNotReady {
				return fmt.Errorf("node %s still tainted not-ready", n.name)
			}
		}
		return nil
	})
	return n
}

// replica is one RunControl in this process.
type replica struct {
	name   string
	url    string
	admin  *client.Client
	cancel context.CancelFunc
	done   chan error
	cut    func() // cuts its database connections, now and later
}

// startReplica starts a control replica and waits until it serves.
func (c *controlCluster) startReplica(name string) *replica { return c.startReplicaWith(name, nil) }

// startReplicaWith is startReplica with the config changed by tweak first.
func (c *controlCluster) startReplicaWith(name string, tweak func(*ControlConfig)) *replica {
	t := c.t
	t.Helper()
	proxyDSN, cut := pgProxy(t, c.dsn)
	addr := make(chan string, 1)
	dir := t.TempDir()
	cfg := ControlConfig{
		Config: Config{Listen: "127.0.0.1:0", DataDir: dir, Store: proxyDSN, LogFormat: "text", LogLevel: "debug",
			AgentBinary:  filepath.Join(dir, "no-agent-here"),
			DefaultQuota: defaultTestQuota},
		Kubeconfig: c.rig.Kubeconfig, Namespace: c.ns, WorkerTokenFile: c.tokenF, AdminKeyFile: c.adminF,
		LeaderLease: c.ns + "/space-control", LeaderLeaseDuration: testLeaderLease,
		OperationLeaseTTL: testOpLease, ScheduleTimeout: testScheduleLimit,
		Serving: func(a string) { addr <- a },
	}
	if tweak != nil {
		tweak(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{name: name, cancel: cancel, done: make(chan error, 1), cut: cut}
	go func() { r.done <- RunControl(ctx, cfg, c.logger(name)) }()
	select {
	case a := <-addr:
		r.url = "http://" + a
	case err := <-r.done:
		t.Fatalf("replica %s did not start: %v", name, err)
	case <-time.After(90 * time.Second):
		cancel()
		t.Fatalf("replica %s did not serve within 90s", name)
	}
	t.Cleanup(func() { r.stop(t) })
	var err error
	if r.admin, err = client.New(r.url, c.adminKey, nil); err != nil {
		t.Fatal(err)
	}
	return r
}

// stop ends the replica and waits for RunControl to return (bounded).
func (r *replica) stop(t *testing.T) {
	if r.done == nil {
		return
	}
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("replica %s: %v", r.name, err)
		}
	case <-time.After(60 * time.Second):
		t.Errorf("replica %s did not stop in 60s", r.name)
	}
	r.done = nil
}

// pgProxy forwards a unix socket to the database's and returns the DSN
// that goes through it, and cut, which closes every connection through it
// and refuses new ones: to the replica behind it the database is gone.
func pgProxy(t *testing.T, dsn string) (string, func()) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	target := filepath.Join(q.Get("host"), ".s.PGSQL.5432")
	dir, err := os.MkdirTemp("", "pgproxy-")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, ".s.PGSQL.5432"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	closed := false
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("unix", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				in.Close()
				out.Close()
				continue
			}
			conns = append(conns, in, out)
			mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	cut := func() {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return
		}
		closed = true
		ln.Close()
		for _, c := range conns {
			c.Close()
		}
	}
	t.Cleanup(func() { cut(); os.RemoveAll(dir) })
	q.Set("host", dir)
	u.RawQuery = q.Encode()
	return u.String(), cut
}

// syncBuffer collects the cluster's logs for a failed test's report.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// count is how many log lines hold all of words.
func (b *syncBuffer) count(words ...string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, line := range strings.Split(b.buf.String(), "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			n++
		}
	}
	return n
}

func readAll(t *testing.T, rc io.ReadCloser) string {
	t.Helper()
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
