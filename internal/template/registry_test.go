package template

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/space-sandbox/space/internal/errdefs"
)

// listener is a loopback server that counts the connections it accepted.
type listener struct {
	host  string // "127.0.0.1:port"
	conns atomic.Int32
}

// serveHTTP serves h on loopback, counting connections.
func serveHTTP(t *testing.T, h http.Handler) *listener {
	t.Helper()
	l := &listener{}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			l.conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	l.host = strings.TrimPrefix(srv.URL, "http://")
	return l
}

// serveRegistry runs go-containerregistry's in-memory registry holding
// the test image as space/app:1.
func serveRegistry(t *testing.T) *listener {
	t.Helper()
	l := serveHTTP(t, registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	r, err := name.ParseReference(l.host + "/space/app:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, testImage(t)); err != nil {
		t.Fatal(err)
	}
	l.conns.Store(0) // count only what the builder does
	return l
}

// serveGarbage accepts TCP connections and answers each with bytes that are
// not HTTP.
func serveGarbage(t *testing.T) *listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	l := &listener{host: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.conns.Add(1)
			c.SetDeadline(time.Now().Add(5 * time.Second))
			c.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n"))
			c.Close()
		}
	}()
	return l
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// pullErrOf resolves an oci image source with a builder allowing allow and
// returns the error.
func pullErrOf(t *testing.T, ref string, allow ...string) error {
	t.Helper()
	b, _ := newTestBuilder(t, func(c *BuilderConfig) { c.RegistryAllow = allow })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := b.Build(ctx, BuildRequest{Name: "pulled", Source: Source{Type: SourceOCI, Image: ref}}, nil, nil)
	if err == nil {
		t.Fatalf("pull of %s succeeded", ref)
	}
	return err
}

// wantUnreachable checks err is the one generic registry failure.
func wantUnreachable(t *testing.T, ref string, err error) {
	t.Helper()
	var pub *errdefs.Public
	if !errors.As(err, &pub) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("err = %v, want a public unavailable error", err)
	}
	if want := `"` + ref + `": registry unreachable or not allowed`; pub.Message != want {
		t.Errorf("message = %q, want %q", pub.Message, want)
	}
}

func TestPullRefusedByDefault(t *testing.T) {
	reg := serveRegistry(t)
	ref := reg.host + "/space/app:1"
	err := pullErrOf(t, ref)
	wantUnreachable(t, ref, err)
	if !errors.Is(err, errRefused) {
		t.Errorf("cause = %v, want a policy refusal", err)
	}
	if n := reg.conns.Load(); n != 0 {
		t.Errorf("the registry on loopback saw %d connections, want none", n)
	}
}

func TestPullNameResolvingToLoopback(t *testing.T) {
	reg := serveRegistry(t)
	_, port, _ := net.SplitHostPort(reg.host)
	ref := "localhost:" + port + "/space/app:1"
	// The address is allowed, the name is not: what it resolves to decides.
	err := pullErrOf(t, ref, reg.host)
	wantUnreachable(t, ref, err)
	if !errors.Is(err, errRefused) {
		t.Errorf("cause = %v, want a policy refusal", err)
	}
	if n := reg.conns.Load(); n != 0 {
		t.Errorf("registry saw %d connections, want none", n)
	}
}

func TestPullRedirectToLoopback(t *testing.T) {
	inner := serveRegistry(t)
	front := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			w.WriteHeader(http.StatusOK)
			return
		}
		http.Redirect(w, r, "http://"+inner.host+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	ref := front.host + "/space/app:1"
	err := pullErrOf(t, ref, front.host)
	wantUnreachable(t, ref, err)
	if !errors.Is(err, errRefused) {
		t.Errorf("cause = %v, want a policy refusal", err)
	}
	if front.conns.Load() == 0 {
		t.Error("the allowed front registry saw no connection")
	}
	if n := inner.conns.Load(); n != 0 {
		t.Errorf("the redirect target saw %d connections, want none", n)
	}
}

// What answers must not show in the error: a tenant cannot tell a closed
// port from a service that is no registry from a refusal.
func TestPullErrorsAlike(t *testing.T) {
	notFound := serveHTTP(t, http.NotFoundHandler())
	html := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html>router admin</html>")
	}))
	garbage := serveGarbage(t)
	refused := serveRegistry(t)
	closed := closedPort(t)
	allow := []string{notFound.host, html.host, garbage.host, closed}

	var first *errdefs.Public
	for _, host := range []string{closed, notFound.host, html.host, garbage.host, refused.host} {
		ref := host + "/p/i:latest"
		err := pullErrOf(t, ref, allow...)
		wantUnreachable(t, ref, err)
		var pub *errdefs.Public
		errors.As(err, &pub)
		if first == nil {
			first = pub
			continue
		}
		if strings.ReplaceAll(pub.Message, host, "H") != strings.ReplaceAll(first.Message, closed, "H") || pub.Class != first.Class {
			t.Errorf("%s: %s %q differs from %s %q", host, pub.Class, pub.Message, first.Class, first.Message)
		}
	}
	if notFound.conns.Load() == 0 || html.conns.Load() == 0 || garbage.conns.Load() == 0 {
		t.Error("an allowed listener was not reached")
	}
	if n := refused.conns.Load(); n != 0 {
		t.Errorf("the refused registry saw %d connections", n)
	}
}

func TestPullThroughProxy(t *testing.T) {
	inner := serveRegistry(t)
	var proxied atomic.Int32
	proxy := serveHTTP(t, &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		proxied.Add(1)
		r.Out.URL = r.In.URL // a forward proxy: the request names its destination
	}, ErrorLog: log.New(io.Discard, "", 0)}) // CONNECT (the https probe) is not served
	b, _ := newTestBuilder(t, nil)
	b.registry.proxyFor = func(*http.Request) (*url.URL, error) { return &url.URL{Scheme: "http", Host: proxy.host}, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := inner.host + "/space/app:1"
	if _, err := b.pullImage(ctx, ref); !errors.Is(err, errRefused) {
		t.Fatalf("pull of a loopback registry through a proxy: %v, want refused", err)
	}
	if n := proxied.Load(); n != 0 {
		t.Errorf("the proxy forwarded %d requests for a refused registry", n)
	}

	// Allowed by name, the same registry is reached through the proxy.
	b, _ = newTestBuilder(t, func(c *BuilderConfig) { c.RegistryAllow = []string{inner.host} })
	b.registry.proxyFor = func(*http.Request) (*url.URL, error) { return &url.URL{Scheme: "http", Host: proxy.host}, nil }
	img, err := b.pullImage(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := img.ConfigFile(); err != nil {
		t.Fatal(err)
	}
	if proxied.Load() == 0 || inner.conns.Load() == 0 {
		t.Errorf("proxied %d requests, registry saw %d connections", proxied.Load(), inner.conns.Load())
	}
}

func TestRegistryPolicyAddresses(t *testing.T) {
	p, err := newRegistryPolicy(nil)
	if err != nil {
		t.Fatal(err)
	}
	own := netip.MustParseAddr("203.0.113.7") // documentation range: not refused by range
	p.localAddrs = func() ([]net.Addr, error) {
		return []net.Addr{&net.IPNet{IP: own.AsSlice(), Mask: net.CIDRMask(24, 32)}}, nil
	}
	for addr, refused := range map[string]bool{
		"127.0.0.1": true, "127.9.9.9": true, "::1": true, "::ffff:127.0.0.1": true,
		"10.1.2.3": true, "172.16.0.1": true, "172.31.255.255": true, "192.168.1.1": true, "fd00::1": true,
		"169.254.169.254": true, "fe80::1": true, "0.0.0.0": true, "::": true,
		"224.0.0.1": true, "ff02::1": true, "100.64.0.1": true, "100.127.255.255": true,
		"255.255.255.255": true, "64:ff9b::7f00:1": true, "2002:7f00:1::": true,
		"203.0.113.7": true, // this host's own
		"8.8.8.8":     false, "2001:4860:4860::8888": false, "172.32.0.1": false, "100.128.0.1": false,
		"203.0.113.8": false, "::ffff:1.1.1.1": false,
	} {
		if got := p.refuse(netip.MustParseAddr(addr)) != ""; got != refused {
			t.Errorf("%s refused = %v, want %v", addr, got, refused)
		}
	}
}

func TestParseRegistryAllow(t *testing.T) {
	allow, err := parseRegistryAllow([]string{"Registry.Internal:5000", "10.0.0.5", "[::1]:5000", " ", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	p := &registryPolicy{allow: allow}
	for hostport, want := range map[string]bool{
		"registry.internal:5000": true, "registry.internal:443": false, "10.0.0.5:443": true, "10.0.0.5:5000": true,
		"[::1]:5000": true, "[::1]:5001": false, "localhost:80": true, "other:5000": false,
	} {
		if got := p.allowed(hostport); got != want {
			t.Errorf("allowed(%s) = %v, want %v", hostport, got, want)
		}
	}
	for _, bad := range []string{"http://reg", "reg/path", "reg:port:x", "user@reg", "reg:abc", ":5000", "a b"} {
		if _, err := parseRegistryAllow([]string{bad}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: err = %v, want invalid_argument", bad, err)
		}
	}
}
