package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// withCA turns HTTPS injection on with a fresh CA; upstreams are verified
// against the harness's test CA (as --egress-ca-file does) unless
// systemRoots.
func withCA(t testing.TB, systemRoots bool) (func(*env, *Config), **CA) {
	var ca *CA
	return func(e *env, cfg *Config) {
		var err error
		ca, err = LoadOrCreateCA(t.TempDir())
		must(t, err)
		cfg.CA = ca
		if !systemRoots {
			cfg.UpstreamRoots = e.caPool
		}
	}, &ca
}

// guestTLS makes one HTTPS request from the guest to addr with SNI and
// Host name, trusting only roots, and returns the response (body read),
// the connection state, and the handshake error if any.
func (e *env) guestTLS(addr, name string, roots *x509.CertPool, path string, hdr ...string) (*http.Response, string, tls.ConnectionState, error) {
	e.t.Helper()
	c, err := e.dial(context.Background(), "tcp4", addr)
	must(e.t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}})
	if err := tc.Handshake(); err != nil {
		return nil, "", tls.ConnectionState{}, err
	}
	var extra strings.Builder
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&extra, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", path, name, extra.String())
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return nil, "", tc.ConnectionState(), err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), tc.ConnectionState(), nil
}

func caPool(ca *CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(ca.CertPEM())
	return p
}

func TestHTTPSCredentialInjected(t *testing.T) {
	mod, ca := withCA(t, false)
	e := newEnvWith(t, injectPolicy, mod)
	// The guest trusts only the deployment CA: the handshake verifies the
	// leaf chains to it and names the SNI.
	resp, body, st, err := e.guestTLS(e.addrA.String()+":443", "allowed.test", caPool(*ca), "/echo")
	must(t, err)
	if st.NegotiatedProtocol != "http/1.1" {
		t.Fatalf("ALPN %q, want http/1.1 only", st.NegotiatedProtocol)
	}
	if got := st.PeerCertificates[0]; got.Issuer.CommonName != (*ca).Certificate().Subject.CommonName || got.DNSNames[0] != "allowed.test" {
		t.Fatalf("guest saw leaf %v for %v", got.Issuer, got.DNSNames)
	}
	if resp.StatusCode != 200 || !strings.Contains(body, "server=A host=allowed.test proto=HTTP/1.1") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if h := <-e.seen; h.Get("Authorization") != "Bearer "+testSecret {
		t.Fatalf("upstream got Authorization %q", h.Get("Authorization"))
	}
	var hdr strings.Builder
	resp.Header.Write(&hdr)
	if strings.Contains(body, testSecret) || strings.Contains(hdr.String(), testSecret) {
		t.Fatalf("secret reached the guest:\n%s\n%s", hdr.String(), body)
	}
	if !strings.Contains(body, "Authorization: Bearer ****") || !strings.Contains(resp.Header.Get("X-Echo-Authorization"), "****") {
		t.Fatalf("echo not masked:\n%s\n%s", hdr.String(), body)
	}
	r := e.lastRecord("https")
	if !r.Allowed || r.Upstream != e.addrA.String()+":443" || len(r.Injected) != 1 || strings.Contains(fmt.Sprint(r), testSecret) {
		t.Fatalf("audit %+v", r)
	}
}

func TestHTTPSPassThroughWithoutInjectRule(t *testing.T) {
	mod, ca := withCA(t, false)
	e := newEnvWith(t, injectPolicy, mod)
	// second.test is allowed, on the same server, without inject rules: the
	// guest talks to the upstream's own certificate, end to end.
	if _, _, _, err := e.guestTLS(e.addrA.String()+":443", "second.test", caPool(*ca), "/echo"); err == nil {
		t.Fatal("a connection without inject rules was intercepted")
	}
	resp, body, st, err := e.guestTLS(e.addrA.String()+":443", "second.test", e.caPool, "/echo", "Authorization", "mine")
	must(t, err)
	if resp.StatusCode != 200 || st.PeerCertificates[0].Subject.CommonName != "test" {
		t.Fatalf("%d %q, peer %v", resp.StatusCode, body, st.PeerCertificates[0].Subject)
	}
	if h := <-e.seen; h.Get("Authorization") != "mine" {
		t.Fatalf("second.test request carried Authorization %q", h.Get("Authorization"))
	}
	if r := e.lastRecord("tls"); !r.Allowed || r.Rule != "allow second.test" {
		t.Fatalf("audit %+v", r)
	}
	if r := e.lastRecord("https"); r.Kind != "" {
		t.Fatalf("intercepted: %+v", r)
	}
}

func TestHTTPSUntrustedUpstreamRefused(t *testing.T) {
	mod, ca := withCA(t, true) // system roots only: the test CA is unknown
	e := newEnvWith(t, injectPolicy, mod)
	resp, body, _, err := e.guestTLS(e.addrA.String()+":443", "allowed.test", caPool(*ca), "/echo")
	must(t, err)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "certificate not trusted") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if n := e.hits["tlsA"].Load(); n != 0 {
		t.Fatalf("upstream served %d requests", n)
	}
	if r := e.lastRecord("https"); r.Allowed || r.Rule != whyUntrusted {
		t.Fatalf("audit %+v", r)
	}
}

func TestHTTPSHostSwitchInsideInterception(t *testing.T) {
	mod, ca := withCA(t, false)
	e := newEnvWith(t, injectPolicy, mod)
	c, err := e.dial(context.Background(), "tcp4", e.addrA.String()+":443")
	must(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: caPool(*ca)})
	fmt.Fprintf(tc, "GET /echo HTTP/1.1\r\nHost: other.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	must(t, err)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("Host other.test inside allowed.test's TLS: %d", resp.StatusCode)
	}
	if e.hits["tlsB"].Load() != 0 || e.hits["tlsA"].Load() != 0 {
		t.Fatal("an upstream was reached")
	}
}

func TestHTTPSInjectOffPassesThrough(t *testing.T) {
	e := newEnv(t, injectPolicy) // no CA: the gate is off
	if e.svc.TrustedCA() != nil {
		t.Fatal("TrustedCA without a CA")
	}
	resp, body, st, err := e.guestTLS(e.addrA.String()+":443", "allowed.test", e.caPool, "/echo")
	must(t, err)
	if resp.StatusCode != 200 || st.PeerCertificates[0].Subject.CommonName != "test" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if h := <-e.seen; h.Get("Authorization") != "" {
		t.Fatalf("injected into pass-through TLS: %q", h.Get("Authorization"))
	}
	if r := e.lastRecord("tls"); !r.Allowed || !strings.Contains(r.Rule, "passed through") {
		t.Fatalf("audit %+v", r)
	}
}

func TestInterceptConfigForLegacyClients(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	must(t, err)
	modern, err := interceptConfig(ca, "allowed.test", &tls.ClientHelloInfo{SignatureSchemes: []tls.SignatureScheme{tls.ECDSAWithP256AndSHA256}})
	must(t, err)
	if _, ok := modern.Certificates[0].Leaf.PublicKey.(*ecdsa.PublicKey); !ok || modern.CipherSuites != nil || modern.MaxVersion != 0 {
		t.Fatalf("modern client config %+v", modern)
	}
	// busybox wget's TLS 1.2 hello has no signature_algorithms.
	legacy, err := interceptConfig(ca, "allowed.test", &tls.ClientHelloInfo{})
	must(t, err)
	if _, ok := legacy.Certificates[0].Leaf.PublicKey.(*rsa.PublicKey); !ok || legacy.MaxVersion != tls.VersionTLS12 || len(legacy.CipherSuites) == 0 {
		t.Fatalf("legacy client config %+v", legacy)
	}
	if _, err := legacy.Certificates[0].Leaf.Verify(x509.VerifyOptions{Roots: caPool(ca), DNSName: "allowed.test"}); err != nil {
		t.Fatalf("legacy leaf does not chain to the CA: %v", err)
	}
	for _, cfg := range []*tls.Config{modern, legacy} {
		if len(cfg.NextProtos) != 1 || cfg.NextProtos[0] != "http/1.1" {
			t.Fatalf("ALPN %v", cfg.NextProtos)
		}
	}
}
