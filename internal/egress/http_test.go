package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestHTTPHostHeaderOtherDomain(t *testing.T) {
	e := newEnv(t, allowAllowed)
	// To the allowed domain's address, naming another domain.
	body, code, err := e.get("http://"+e.addrA.String()+"/", "Host", "other.test")
	if code != http.StatusForbidden {
		t.Fatalf("want 403, got %d %q %v", code, body, err)
	}
	// A second request on a kept-alive connection naming another domain.
	c, err := e.dial(context.Background(), "tcp4", e.addrA.String()+":80")
	must(t, err)
	defer c.Close()
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	must(t, err)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("first request %d", resp.StatusCode)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err == nil && resp.StatusCode != http.StatusForbidden {
		t.Fatalf("second request with Host other.test: %d", resp.StatusCode)
	}
	if e.hits["B"].Load() != 0 || e.hits["A"].Load() != 1 {
		t.Fatalf("hits A=%d B=%d", e.hits["A"].Load(), e.hits["B"].Load())
	}
}

func TestTLSSNIAllowedButOtherIP(t *testing.T) {
	e := newEnv(t, allowAllowed)
	c, err := e.dial(context.Background(), "tcp4", e.addrB.String()+":443")
	must(t, err)
	defer c.Close()
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: e.caPool})
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "server=A\n" {
			t.Fatalf("reached %q, want the platform-resolved server A", b)
		}
	}
	if e.hits["tlsB"].Load() != 0 {
		t.Fatal("the guest-chosen address was reached")
	}
	if r := e.lastRecord("tls"); r.Upstream != e.addrA.String()+":443" {
		t.Fatalf("audit %+v", r)
	}
}

var injectPolicy = Policy{
	Egress: Egress{Allow: []string{"allowed.test", "second.test"}},
	Inject: []Inject{{Domain: "allowed.test", Header: "Authorization", Value: "Bearer ${secret:token}"}},
}

func TestCredentialInjectedForAllowedDomainOnly(t *testing.T) {
	e := newEnv(t, injectPolicy)
	_, code, err := e.get("http://allowed.test/")
	must(t, err)
	if code != 200 {
		t.Fatal(code)
	}
	if h := <-e.seen; h.Get("Authorization") != "Bearer "+testSecret {
		t.Fatalf("upstream got Authorization %q", h.Get("Authorization"))
	}
	// second.test resolves to the same server but has no inject rule; and
	// the guest's own Authorization must not be replaced by the secret.
	_, _, err = e.get("http://second.test/", "Authorization", "mine")
	must(t, err)
	if h := <-e.seen; h.Get("Authorization") != "mine" {
		t.Fatalf("second.test request carried Authorization %q", h.Get("Authorization"))
	}
	if r := e.lastRecord("http"); len(r.Injected) != 0 {
		t.Fatalf("audit says injected %v for second.test", r.Injected)
	}
}

func TestEchoedSecretScrubbed(t *testing.T) {
	e := newEnv(t, injectPolicy)
	req, _ := http.NewRequest("GET", "http://allowed.test/", nil)
	resp, err := e.client().Do(req)
	must(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var hdr strings.Builder
	resp.Header.Write(&hdr)
	if strings.Contains(string(b), testSecret) || strings.Contains(hdr.String(), testSecret) {
		t.Fatalf("secret reached the guest:\n%s\n%s", hdr.String(), b)
	}
	if !strings.Contains(string(b), "Authorization: Bearer ****") {
		t.Fatalf("echo not masked as expected:\n%s", b)
	}
	if r := e.lastRecord("http"); len(r.Injected) != 1 || strings.Contains(fmt.Sprint(r), testSecret) {
		t.Fatalf("audit %+v", r)
	}
}

func TestPolicyChangeAppliesAtOnce(t *testing.T) {
	e := newEnv(t, allowAllowed)
	// A kept-alive HTTP connection and a long TLS connection, both allowed.
	c, err := e.dial(context.Background(), "tcp4", e.addrA.String()+":80")
	must(t, err)
	defer c.Close()
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	must(t, err)
	io.Copy(io.Discard, resp.Body)

	tc, err := e.dial(context.Background(), "tcp4", e.addrA.String()+":443")
	must(t, err)
	defer tc.Close()
	tlsc := tls.Client(tc, &tls.Config{ServerName: "allowed.test", RootCAs: e.caPool})
	must(t, tlsc.Handshake())

	must(t, e.svc.SetPolicy(context.Background(), e.id, Policy{}))

	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err == nil && resp.StatusCode == 200 {
		t.Fatal("kept-alive connection still allowed after the policy change")
	}
	tlsc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := tlsc.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		t.Fatalf("open TLS connection not closed: %v", err)
	}
	body, code, err := e.get("http://allowed.test/")
	e.expectBlocked("new connection", body, code, err)

	must(t, e.svc.SetPolicy(context.Background(), e.id, allowAllowed))
	if _, code, err := e.get("http://allowed.test/"); err != nil || code != 200 {
		t.Fatalf("after re-allowing: %d %v", code, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestConnectionLimit(t *testing.T) {
	m := newBudgetMetrics()
	e := newEnvWith(t, allowAllowed, func(_ *env, c *Config) { c.Budgets = m.Metrics }) // MaxConns 8
	var held []net.Conn
	for i := 0; i < 8; i++ {
		c, err := e.dial(context.Background(), "tcp4", e.addrA.String()+":80")
		must(t, err)
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	out, _ := e.rawExchange(e.addrA.String()+":80", "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if out != "" {
		t.Fatalf("ninth connection served: %q", out)
	}
	if r := e.lastRecord("tcp"); r.Rule != "connection limit" {
		t.Fatalf("audit %+v", r)
	}
	if got := m.exhausted(t, budgetConns); got != 1 {
		t.Fatalf("exhausted{%s} = %v, want 1", budgetConns, got)
	}
}

// TestKeptAliveHostSwitch: requests on one kept-alive guest connection
// naming different allowed hosts each reach their own upstream (the
// connection's upstream writer follows the switch), and a request naming
// a denied host among them is refused without reaching anyone.
func TestKeptAliveHostSwitch(t *testing.T) {
	e := newEnv(t, Policy{Egress: Egress{Allow: []string{"allowed.test", "other.test"}}})
	c, err := e.dial(context.Background(), "tcp4", e.addrA.String()+":80")
	must(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	br := bufio.NewReader(c)
	get := func(host string) (int, string) {
		t.Helper()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		resp, err := http.ReadResponse(br, nil)
		must(t, err)
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i, want := range []struct{ host, server string }{
		{"allowed.test", "A"}, {"other.test", "B"}, {"other.test", "B"}, {"allowed.test", "A"},
	} {
		code, body := get(want.host)
		if code != 200 || !strings.HasPrefix(body, "server="+want.server+" host="+want.host) {
			t.Fatalf("request %d to %s: %d %q", i, want.host, code, body)
		}
	}
	if a, b := e.hits["A"].Load(), e.hits["B"].Load(); a != 2 || b != 2 {
		t.Fatalf("hits A=%d B=%d, want 2 and 2", a, b)
	}
	if code, body := get("second.test"); code != http.StatusForbidden {
		t.Fatalf("denied host on the kept-alive connection: %d %q", code, body)
	}
	if a, b := e.hits["A"].Load(), e.hits["B"].Load(); a != 2 || b != 2 {
		t.Fatalf("after the denied request hits A=%d B=%d, want 2 and 2", a, b)
	}
}
