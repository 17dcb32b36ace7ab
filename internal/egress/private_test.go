package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/space-sandbox/space/internal/network"
)

// lab is the network a worker sits in, stood in for by two namespaces of
// the test's own: the proxy dials its upstreams from labNS (Config.Dial),
// whose only link leads to upNS, which holds a private address of every
// kind a cluster uses and one public-looking address, each with a server
// on ports 80 (HTTP), 443 (TLS) and 7000 (a raw banner). Nothing is added
// to the host's own namespace, so the test's 10.x or 169.254.169.254 never
// shadows a real one.
type lab struct {
	dialNS string
	hits   map[string]*atomic.Int64 // label -> connections accepted
}

// labAddrs are the lab's servers by label; name() is each one's DNS name.
var labAddrs = map[string]netip.Addr{
	"ten":      netip.MustParseAddr("10.77.0.2"),
	"ten2":     netip.MustParseAddr("10.78.0.2"),
	"rfc172":   netip.MustParseAddr("172.16.77.2"),
	"rfc192":   netip.MustParseAddr("192.168.77.2"),
	"cgnat":    netip.MustParseAddr("100.64.77.2"),
	"metadata": netip.MustParseAddr("169.254.169.254"),
	"bench":    netip.MustParseAddr("198.19.77.2"),
	// Documentation space (TEST-NET-3): not a private range (nothing is
	// numbered there), so it stands in for the internet.
	"public": netip.MustParseAddr("203.0.113.77"),
}

func labName(label string) string { return label + ".lab.test" }

// newLabEnv is newEnvWith in a lab: the guest under policy p, every lab
// name in the resolver, and the Service configured by mod after the lab's
// dialer is set.
func newLabEnv(t *testing.T, p Policy, mod func(*env, *Config)) (*env, *lab) {
	t.Helper()
	var l *lab
	e := newEnvWith(t, p, func(e *env, cfg *Config) {
		l = startLab(e)
		cfg.Dial = l.dial
		cfg.AllowPrivate = nil
		for label, a := range labAddrs {
			e.res.set(labName(label), a)
		}
		if mod != nil {
			mod(e, cfg)
		}
	})
	return e, l
}

func startLab(e *env) *lab {
	t := e.t
	l := &lab{hits: map[string]*atomic.Int64{}}
	l.dialNS = newNamedNS(t, fmt.Sprintf("space-tw-%s", e.id))
	upNS := newNamedNS(t, fmt.Sprintf("space-tp-%s", e.id))
	dnl, unl := nlAt(t, l.dialNS), nlAt(t, upNS)
	// Made inside labNS, the pair never appears in the host's namespace.
	must(t, dnl.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lab0"}, PeerName: "lab1"}))
	peer, err := dnl.LinkByName("lab1")
	must(t, err)
	h, err := netns.GetFromPath(upNS)
	must(t, err)
	must(t, dnl.LinkSetNsFd(peer, int(h)))
	h.Close()
	up := func(nl *netlink.Handle, name string, addrs ...netip.Addr) {
		link, err := nl.LinkByName(name)
		must(t, err)
		for _, a := range addrs {
			must(t, nl.AddrAdd(link, &netlink.Addr{IPNet: prefixNet(a, 32)}))
		}
		must(t, nl.LinkSetUp(link))
		lo, _ := nl.LinkByName("lo")
		must(t, nl.LinkSetUp(lo))
		// Every destination is on the link: ARP finds whoever holds it.
		must(t, nl.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: prefixNet(netip.IPv4Unspecified(), 0), Scope: netlink.SCOPE_LINK}))
	}
	up(dnl, "lab0", netip.MustParseAddr("203.0.113.1"))
	var all []netip.Addr
	for _, a := range labAddrs {
		all = append(all, a)
	}
	up(unl, "lab1", all...)

	cert := selfSigned(t)
	for label, a := range labAddrs {
		hits := &atomic.Int64{}
		l.hits[label] = hits
		listen := func(port int) net.Listener {
			var ln net.Listener
			must(t, network.InNamespace(upNS, func() (err error) {
				ln, err = net.Listen("tcp4", netip.AddrPortFrom(a, uint16(port)).String())
				return err
			}))
			t.Cleanup(func() { ln.Close() })
			return &countingListener{Listener: ln, n: hits}
		}
		page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "lab=%s\n", label) })
		srv := &http.Server{Handler: page}
		tsrv := &http.Server{Handler: page}
		t.Cleanup(func() { srv.Close(); tsrv.Close() })
		go srv.Serve(listen(80))
		go tsrv.Serve(tls.NewListener(listen(443), &tls.Config{Certificates: []tls.Certificate{cert}}))
		raw := listen(7000)
		go func() {
			for {
				c, err := raw.Accept()
				if err != nil {
					return
				}
				fmt.Fprintf(c, "lab-hello %s\n", label)
				c.Close()
			}
		}()
	}
	return l
}

// dial is the worker's dialer, in labNS.
func (l *lab) dial(ctx context.Context, nw, addr string) (net.Conn, error) {
	var c net.Conn
	err := network.InNamespace(l.dialNS, func() (err error) {
		d := net.Dialer{Timeout: 3 * time.Second}
		c, err = d.DialContext(ctx, nw, addr)
		return err
	})
	return c, err
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// reach tries label's server from the guest four ways: raw TCP to its
// address, HTTP to its name (through the platform's DNS), HTTP to the
// public address naming it in Host, and TLS to the public address naming
// it in SNI (the last two: a guest that knows the answer it wants). It
// returns, per way, the upstream's answer ("" when refused) and the audit
// record the proxy wrote.
func (e *env) reach(label string) map[string]struct {
	got string
	rec Record
} {
	e.t.Helper()
	a, name := labAddrs[label], labName(label)
	pub := labAddrs["public"].String()
	out := map[string]struct {
		got string
		rec Record
	}{}
	// (Data first: under default allow the proxy waits for the guest's
	// first bytes to tell TLS and HTTP from other TCP.)
	raw, _ := e.rawExchange(a.String()+":7000", "hello, upstream\n")
	out["tcp"] = struct {
		got string
		rec Record
	}{raw, e.lastRecord("tcp")}
	body, code, _ := e.get("http://"+name+"/", "Connection", "close")
	if code != http.StatusOK {
		body = ""
	}
	out["dns"] = struct {
		got string
		rec Record
	}{body, e.lastRecord("dns")}
	body, code, _ = e.get("http://"+pub+"/", "Host", name, "Connection", "close")
	if code != http.StatusOK {
		body = ""
	}
	out["http"] = struct {
		got string
		rec Record
	}{body, e.lastRecord("http")}
	got := ""
	if c, err := e.dial(context.Background(), "tcp4", pub+":443"); err == nil {
		tc := tls.Client(c, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if tc.Handshake() == nil {
			fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", name)
			var b strings.Builder
			buf := make([]byte, 512)
			for {
				n, err := tc.Read(buf)
				b.Write(buf[:n])
				if err != nil {
					break
				}
			}
			if i := strings.Index(b.String(), "lab="); i >= 0 {
				got = b.String()[i:]
			}
		}
		c.Close()
	}
	out["tls"] = struct {
		got string
		rec Record
	}{got, e.awaitRecord("tls", func(r Record) bool { return strings.HasPrefix(r.Destination, name+":") })}
	return out
}

// expectRefused checks that every way to label was refused, and audited
// with rule, and that its server accepted nothing.
func (e *env) expectRefused(l *lab, label, rule string) {
	e.t.Helper()
	for way, r := range e.reach(label) {
		if r.got != "" {
			e.t.Errorf("%s by %s: reached the upstream: %q", label, way, r.got)
		}
		if r.rec.Allowed || r.rec.Rule != rule {
			e.t.Errorf("%s by %s: audit record %+v, want refused with rule %q", label, way, r.rec, rule)
		}
	}
	if n := l.hits[label].Load(); n != 0 {
		e.t.Errorf("%s's server accepted %d connections", label, n)
	}
}

// expectReached checks that every way to label reached its server.
func (e *env) expectReached(label string) {
	e.t.Helper()
	for way, r := range e.reach(label) {
		want := "lab=" + label + "\n"
		if way == "tcp" {
			want = "lab-hello " + label + "\n"
		}
		if r.got != want || !r.rec.Allowed {
			e.t.Errorf("%s by %s: got %q (audit %+v), want %q", label, way, r.got, r.rec, want)
		}
	}
}

var allowAll = Policy{Egress: Egress{Default: "allow"}}

// Under default allow (what older E2B SDKs ask for), every private range a
// cluster's nodes, Pods, Services, object store or metadata service lives
// in is refused, by address and by a name resolving there, and audited;
// the internet is reached.
func TestPrivateRangesRefusedUnderAllow(t *testing.T) {
	e, l := newLabEnv(t, allowAll, nil)
	for _, label := range []string{"ten", "rfc172", "rfc192", "cgnat", "metadata", "bench"} {
		e.expectRefused(l, label, whyPrivate)
	}
	e.expectReached("public")
}

// A tenant's own rule naming a private range (by CIDR and by name) does
// not open it: the operator decides.
func TestTenantAllowCannotOpenPrivate(t *testing.T) {
	e, l := newLabEnv(t, Policy{Egress: Egress{Allow: []string{"10.0.0.0/8", labName("ten"), labName("public")}}}, nil)
	e.expectRefused(l, "ten", whyPrivate)
	if body, code, err := e.get("http://" + labName("public") + "/"); err != nil || code != http.StatusOK || body != "lab=public\n" {
		t.Errorf("public name: %d %q %v", code, body, err)
	}
}

// What the operator lists in --egress-allow-private is reached as the
// policy allows; the rest of the private ranges stays refused, and a
// metadata address opens only when listed exactly.
func TestAllowPrivateOpensListedRanges(t *testing.T) {
	e, l := newLabEnv(t, allowAll, func(_ *env, cfg *Config) {
		cfg.AllowPrivate = prefixes("10.77.0.0/24", "100.64.77.2/32", "169.254.0.0/16")
	})
	e.expectReached("ten")
	e.expectReached("cgnat")
	e.expectRefused(l, "ten2", whyPrivate)
	e.expectRefused(l, "rfc172", whyPrivate)
	e.expectRefused(l, "metadata", whyPrivate)

	e, _ = newLabEnv(t, allowAll, func(_ *env, cfg *Config) { cfg.AllowPrivate = prefixes("169.254.169.254/32") })
	e.expectReached("metadata")
}

// --egress-deny (Config.Forbidden) refuses a range whatever the tenant's
// rules and the operator's own allow-list say.
func TestEgressDenyOverridesAllowRules(t *testing.T) {
	p := Policy{Egress: Egress{Default: "allow", Allow: []string{"10.0.0.0/8", labName("public"), labName("ten")}}}
	e, l := newLabEnv(t, p, func(_ *env, cfg *Config) {
		cfg.AllowPrivate = prefixes("10.0.0.0/8")
		cfg.Forbidden = append(cfg.Forbidden, prefixes("10.77.0.0/16", "203.0.113.77/32")...)
	})
	e.expectReached("ten2")
	e.expectRefused(l, "ten", whyForbidden)
	// A denied address outside the private ranges: by address and by a
	// name the tenant allows.
	if out, _ := e.rawExchange(labAddrs["public"].String()+":7000", "hello, upstream\n"); out != "" {
		t.Errorf("denied public address answered %q", out)
	}
	if r := e.lastRecord("tcp"); r.Allowed || r.Rule != whyForbidden {
		t.Errorf("audit %+v", r)
	}
	if body, code, err := e.get("http://" + labName("public") + "/"); err == nil && code == http.StatusOK {
		t.Errorf("denied public address reached by name: %q", body)
	}
	if n := l.hits["public"].Load(); n != 0 {
		t.Errorf("denied public server accepted %d connections", n)
	}
}

// rebinder answers a name with the public address until flipped, then
// with a private one: the guest's DNS gets the public answer, the proxy's
// own lookup for the connection the private one.
type rebinder struct {
	Resolver
	name    string
	private atomic.Bool
	calls   atomic.Int32
}

func (r *rebinder) LookupNetIP(ctx context.Context, nw, host string) ([]netip.Addr, error) {
	if host != r.name {
		return r.Resolver.LookupNetIP(ctx, nw, host)
	}
	r.calls.Add(1)
	if r.private.Load() {
		return []netip.Addr{labAddrs["ten"]}, nil
	}
	return []netip.Addr{labAddrs["public"]}, nil
}

// A name whose answer turns private between the guest's lookup and the
// connection is refused: the address dialled is the one judged. An answer
// mixing private and public addresses is dialled at its public one only.
func TestRebindingToPrivateRefused(t *testing.T) {
	reb := &rebinder{name: "rebind.lab.test"}
	e, l := newLabEnv(t, Policy{Egress: Egress{Allow: []string{"rebind.lab.test", "mixed.lab.test"}}}, func(e *env, cfg *Config) {
		reb.Resolver = cfg.Resolver
		cfg.Resolver = reb
		// Answers cached for no time: the proxy looks the name up again
		// for the connection (a cached answer is the one judged and
		// dialled, which is no rebinding).
		cfg.DNSTTL = time.Nanosecond
	})
	addrs, err := e.resolver(net.JoinHostPort(network.GatewayAddr.String(), "53")).LookupNetIP(context.Background(), "ip4", reb.name)
	if err != nil || len(addrs) != 1 || addrs[0] != labAddrs["public"] {
		t.Fatalf("guest lookup before the rebinding: %v %v", addrs, err)
	}
	reb.private.Store(true)
	before := reb.calls.Load()
	body, code, err := e.get("http://"+addrs[0].String()+"/", "Host", reb.name)
	if err == nil && code == http.StatusOK {
		t.Errorf("rebound name reached %q", body)
	}
	if r := e.lastRecord("http"); r.Allowed || r.Rule != whyPrivate {
		t.Errorf("audit %+v, want refused as %q", r, whyPrivate)
	}
	if reb.calls.Load() == before {
		t.Fatal("the proxy did not look the name up again: the rebinding was not exercised")
	}
	if n := l.hits["ten"].Load() + l.hits["public"].Load(); n != 0 {
		t.Errorf("servers accepted %d connections", n)
	}

	e.res.set("mixed.lab.test", labAddrs["ten"], labAddrs["public"])
	body, code, err = e.get("http://mixed.lab.test/")
	if err != nil || code != http.StatusOK || body != "lab=public\n" {
		t.Errorf("mixed answer: %d %q %v, want the public server", code, body, err)
	}
	if n := l.hits["ten"].Load(); n != 0 {
		t.Errorf("the private server accepted %d connections", n)
	}
}
