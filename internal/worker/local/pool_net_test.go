package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/egress"
	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker/local"
)

// The upstreams of TestPoolNetwork: two HTTP servers in a network namespace
// of the test's own, known to the egress service by name through its
// resolver (not /etc/hosts, which other test packages edit).
const (
	poolAllowedHost = "allowed.pool.space.test"
	poolOtherHost   = "other.pool.space.test"
)

var (
	poolUpHost    = netip.MustParseAddr("198.18.203.1")
	poolUpAllowed = netip.MustParseAddr("198.18.203.2")
	poolUpOther   = netip.MustParseAddr("198.18.203.3")
)

type mapResolver map[string]netip.Addr

func (m mapResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := m[strings.TrimSuffix(host, ".")]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// startPoolUpstream makes namespace tpool-up-<pid> (testenv.UpstreamNet)
// with an HTTP server answering "server=<label>" on each upstream address.
func startPoolUpstream(t *testing.T) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ns := testenv.UpstreamNet(t, fmt.Sprintf("tpool-up-%d", os.Getpid()), "tpl", poolUpHost, poolUpAllowed, poolUpOther)
	for label, a := range map[string]netip.Addr{"allowed": poolUpAllowed, "other": poolUpOther} {
		var l net.Listener
		must(network.InNamespace(ns, func() (err error) {
			l, err = net.Listen("tcp4", net.JoinHostPort(a.String(), "80"))
			return err
		}))
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "server=%s\n", label)
		})}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
	}
}

// withNetwork gives e's worker networking and egress (the pool upstream's
// names resolved, the guest prefix forbidden) under an instance named
// after name, and returns its network manager and a lister of the
// instance's namespaces by kind; cleanup closes both and reports any
// namespace left.
func (e *env) withNetwork(name string) (mgr *network.Manager, namespaces func(kind string) []string) {
	t := e.t
	startPoolUpstream(t)
	instance := fmt.Sprintf("%s%d", name, os.Getpid())
	mgr = network.New(context.Background(), network.Config{Instance: instance, PoolSize: 1})
	eg := egress.New(egress.Config{
		Resolver:  mapResolver{poolAllowedHost: poolUpAllowed, poolOtherHost: poolUpOther},
		Forbidden: []netip.Prefix{network.GuestPrefix},
		// The upstream is in the benchmarking range, private: allowed as
		// an operator would a lab network.
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")},
	})
	prefix := network.NamePrefix + instance + "-"
	namespaces = func(kind string) []string {
		names, err := network.ListNamespaces(prefix + kind)
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	t.Cleanup(func() {
		_ = eg.Close(context.Background())
		_ = mgr.Close(context.Background())
		if left := namespaces(""); len(left) != 0 {
			t.Errorf("namespaces left: %v", left)
		}
	})
	e.cfg.Network, e.cfg.Egress = mgr, eg
	return mgr, namespaces
}

// TestPoolNetwork: with networking on, a pooled VM waits on a namespace of
// its own; the create that takes it gets that namespace under its name,
// reaches what its policy allows and nothing else; the refill and Close
// leave no namespace, VMM, mount or file behind.
func TestPoolNetwork(t *testing.T) {
	e := newEnv(t)
	poolRoot := filepath.Join(e.cfg.Storage.Root(), "pool")
	t.Cleanup(func() { testenv.CheckNoLeaks(t, poolRoot) })
	ctx := context.Background()
	mgr, namespaces := e.withNetwork("tpool")
	e.cfg.PoolSize = 1
	w := e.open()
	t.Cleanup(func() { cleanupAll(t, w) })

	if err := w.PrepareTemplate(ctx, spec("sbx_tpl")); err != nil {
		t.Fatal(err)
	}
	awaitPool(t, w, "an entry", func(s local.PoolStats) bool { return s.Ready == 1 })
	pooled := namespaces("pvm-")
	if len(pooled) != 1 {
		t.Fatalf("pooled VM namespaces: %v, want one", pooled)
	}

	s := spec("sbx_pn1")
	s.Network = json.RawMessage(`{"egress":{"default":"deny","allow":["` + poolAllowedHost + `"]}}`)
	if _, err := w.CreateSandbox(ctx, s); err != nil {
		t.Fatal(err)
	}
	if st := w.PoolStats(); st.Taken != 1 {
		t.Fatalf("create did not take the pooled VM: %+v", st)
	}
	if _, err := os.Stat(network.NamespacePath(pooled[0])); !os.IsNotExist(err) {
		t.Fatalf("the taken VM's namespace kept its pool name: %v", err)
	}
	if _, err := os.Stat(network.NamespacePath(mgr.NameOf("sbx_pn1"))); err != nil {
		t.Fatalf("the sandbox has no namespace of its name: %v", err)
	}

	c := agent(t, w, "sbx_pn1")
	if code := sh(t, c, "timeout 30 wget -q -O /tmp/allowed http://"+poolAllowedHost+"/"); code != 0 {
		t.Fatalf("allowed upstream not reached from a pooled sandbox: exit %d", code)
	}
	if b, err := readFile(t, c, "/tmp/allowed"); err != nil || !strings.Contains(string(b), "server=allowed") {
		t.Fatalf("allowed upstream answered %q (%v)", b, err)
	}
	for _, url := range []string{"http://" + poolOtherHost + "/", "http://" + poolUpOther.String() + "/", "http://" + poolUpAllowed.String() + "/"} {
		code := sh(t, c, "timeout 30 wget -q -O /tmp/denied "+url+"; rc=$?; grep -q server= /tmp/denied && exit 99; exit $rc")
		if code == 0 || code == 99 {
			t.Errorf("%s reached from a pooled sandbox (exit %d)", url, code)
		}
	}

	// The refill gets a namespace of its own again; deleting the sandbox
	// removes its namespace.
	awaitPool(t, w, "a refill", func(s local.PoolStats) bool { return s.Ready == 1 && s.Made == 2 })
	if got := namespaces("pvm-"); len(got) != 1 || got[0] == pooled[0] {
		t.Fatalf("refilled pool namespaces: %v", got)
	}
	if err := w.DeleteSandbox(ctx, "sbx_pn1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(network.NamespacePath(mgr.NameOf("sbx_pn1"))); !os.IsNotExist(err) {
		t.Fatalf("deleted sandbox's namespace remains: %v", err)
	}

	// A worker after a crash reaps the pooled VM and namespace the first
	// left; Close drains its own pool, VM and namespace.
	w.Crash()
	w2 := e.open()
	t.Cleanup(func() { cleanupAll(t, w2) })
	if got := namespaces("pvm-"); len(got) != 0 {
		t.Fatalf("pool namespaces of the crashed worker not reaped: %v", got)
	}
	if err := w2.PrepareTemplate(ctx, spec("sbx_tpl")); err != nil {
		t.Fatal(err)
	}
	awaitPool(t, w2, "an entry", func(s local.PoolStats) bool { return s.Ready == 1 })
	w2.Close()
	if got := namespaces("pvm-"); len(got) != 0 {
		t.Fatalf("pool namespaces left after Close: %v", got)
	}
}
