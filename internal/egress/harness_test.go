package egress

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/testenv"
)

func requireNetAdmin(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces, taps, nftables")
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("needs /dev/net/tun")
	}
}

func TestMain(m *testing.M) {
	// Envs take link names and 198.18.n.0/24 networks by a per-process
	// number that another test process of this package could also pick:
	// one process at a time per machine (the lock goes with the process).
	// A fuzz worker is a child of a test process that holds the lock
	// already and runs no envs (fuzz targets make none): it must not wait.
	flag.Parse()
	var lock *os.File
	if f := flag.Lookup("test.fuzzworker"); f == nil || f.Value.String() != "true" {
		var err error
		lock, err = os.OpenFile(filepath.Join(os.TempDir(), "space-egress-test.lock"), os.O_CREATE|os.O_RDWR, 0o600)
		if err == nil {
			_ = unix.Flock(int(lock.Fd()), unix.LOCK_EX)
		}
	}
	before, _ := network.ListNamespaces(network.NamePrefix)
	code := m.Run()
	after, _ := network.ListNamespaces(network.NamePrefix)
	seen := map[string]bool{}
	for _, n := range before {
		seen[n] = true
	}
	mine := fmt.Sprintf("t%d-", os.Getpid())
	for _, n := range after {
		if !seen[n] && strings.Contains(n, mine) {
			fmt.Println("leaked netns:", n)
			code = 1
		}
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "space-u") {
			fmt.Println("leaked link:", l.Attrs().Name)
			code = 1
		}
	}
	runtime.KeepAlive(lock) // held (not finalized) until exit
	os.Exit(code)
}

var envSeq atomic.Int32

// mapResolver is the test's /etc/hosts.
type mapResolver struct {
	mu sync.Mutex
	m  map[string][]netip.Addr
}

func (r *mapResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.m[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *mapResolver) set(name string, addrs ...netip.Addr) {
	r.mu.Lock()
	r.m[name] = addrs
	r.mu.Unlock()
}

// env is one sandbox namespace with a "guest" namespace standing in for the
// VM (its eth0 is a tap whose frames are pumped to and from the sandbox's
// tap0 through the fd QEMU would get), an upstream namespace reachable from
// the host at hostAddr with servers on addrA and addrB, and the egress
// service attached to the sandbox.
type env struct {
	t        testing.TB
	n        int
	svc      *Service
	net      *network.Manager
	sb       *network.Sandbox
	id       string
	res      *mapResolver
	guestNS  string
	upNS     string
	hostAddr netip.Addr
	addrA    netip.Addr
	addrB    netip.Addr
	hits     map[string]*atomic.Int64 // server label -> requests/datagrams seen
	caPool   *x509.CertPool
	seen     chan http.Header // headers upstream A received
	// streamGo lets a /stream response go on past its first part.
	streamGo chan struct{}
}

func newEnv(t testing.TB, p Policy) *env {
	t.Helper()
	return newEnvWith(t, p, nil)
}

// newEnvWith is newEnv with the Service's Config adjusted by mod (given
// the env, whose upstreams are already running).
func newEnvWith(t testing.TB, p Policy, mod func(*env, *Config)) *env {
	t.Helper()
	requireNetAdmin(t)
	n := int(envSeq.Add(1)) + os.Getpid()%50*4
	e := &env{
		t: t, n: n, id: fmt.Sprintf("t%d-%d", os.Getpid(), n),
		res:      &mapResolver{m: map[string][]netip.Addr{}},
		hostAddr: netip.AddrFrom4([4]byte{198, 18, byte(n), 1}),
		addrA:    netip.AddrFrom4([4]byte{198, 18, byte(n), 2}),
		addrB:    netip.AddrFrom4([4]byte{198, 18, byte(n), 3}),
		hits:     map[string]*atomic.Int64{},
		seen:     make(chan http.Header, 64),
		streamGo: make(chan struct{}),
	}
	for _, k := range []string{"A", "B", "udp", "dns", "tlsA", "tlsB", "raw"} {
		e.hits[k] = &atomic.Int64{}
	}
	e.res.set("allowed.test", e.addrA)
	e.res.set("other.test", e.addrB)
	e.res.set("second.test", e.addrA)
	ctx := context.Background()
	e.startUpstream()

	e.net = network.New(ctx, network.Config{Instance: fmt.Sprintf("t%d", os.Getpid()), PoolSize: -1})
	t.Cleanup(func() { e.net.Close(context.Background()) })
	sb, err := e.net.Acquire(ctx, e.id)
	if err != nil {
		t.Fatal(err)
	}
	e.sb = sb
	t.Cleanup(func() { e.net.Release(context.Background(), sb) })
	// The upstreams live in the benchmarking range, which is private: the
	// tests allow it as an operator would a lab network.
	cfg := Config{Resolver: e.res, Forbidden: []netip.Prefix{network.GuestPrefix}, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")},
		MaxConns: 8, PeekTimeout: 2 * time.Second}
	if mod != nil {
		mod(e, &cfg)
	}
	e.svc = New(cfg)
	ls, err := sb.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	secrets := func(ctx context.Context, name string) (string, error) {
		if name == "token" {
			return testSecret, nil
		}
		return "", fmt.Errorf("no secret %q", name)
	}
	if err := e.svc.Attach(ctx, sb.ID, Listeners{Proxy: ls.Proxy, DNSTCP: ls.DNSTCP, DNSUDP: ls.DNSUDP}, p, secrets); err != nil {
		ls.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { e.svc.Detach(context.Background(), sb.ID) })
	e.startGuest()
	return e
}

const testSecret = "s3cr3t-T0KEN-value-0123456789"

func newNamedNS(t testing.TB, name string) string {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	h, err := netns.NewNamed(name)
	if err != nil {
		netns.Set(orig)
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	h.Close()
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	orig.Close()
	runtime.UnlockOSThread()
	t.Cleanup(func() { netns.DeleteNamed(name) })
	return filepath.Join("/run/netns", name) // where netns.NewNamed mounts it
}

func nlAt(t testing.TB, path string) *netlink.Handle {
	h, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nl.Close)
	return nl
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) startUpstream() {
	t := e.t
	e.upNS = newNamedNS(t, fmt.Sprintf("space-tu-%s", e.id))
	hostIf := fmt.Sprintf("space-u%d", e.n)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf}, PeerName: "spacetmp" + fmt.Sprint(e.n)}
	must(t, netlink.LinkAdd(veth))
	t.Cleanup(func() { netlink.LinkDel(veth) })
	peer, err := netlink.LinkByName(veth.PeerName)
	must(t, err)
	h, _ := netns.GetFromPath(e.upNS)
	must(t, netlink.LinkSetNsFd(peer, int(h)))
	h.Close()
	host, _ := netlink.LinkByName(hostIf)
	must(t, netlink.AddrAdd(host, &netlink.Addr{IPNet: prefixNet(e.hostAddr, 24)}))
	must(t, netlink.LinkSetUp(host))
	nl := nlAt(t, e.upNS)
	up, err := nl.LinkByName(veth.PeerName)
	must(t, err)
	for _, a := range []netip.Addr{e.addrA, e.addrB} {
		must(t, nl.AddrAdd(up, &netlink.Addr{IPNet: prefixNet(a, 24)}))
	}
	must(t, nl.LinkSetUp(up))
	lo, _ := nl.LinkByName("lo")
	must(t, nl.LinkSetUp(lo))

	cert := selfSigned(t)
	e.caPool = x509.NewCertPool()
	e.caPool.AddCert(cert.Leaf)
	for label, a := range map[string]netip.Addr{"A": e.addrA, "B": e.addrB} {
		label := label
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			e.hits[label].Add(1)
			if r.URL.Path == "/stream" {
				e.serveStream(w)
				return
			}
			if label == "A" {
				select {
				case e.seen <- r.Header.Clone():
				default:
				}
			}
			w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
			fmt.Fprintf(w, "server=%s host=%s\n", label, r.Host)
			r.Header.Write(w)
		})
		e.serveIn(a, 80, "tcp", func(l net.Listener) { (&http.Server{Handler: handler}).Serve(l) })
		tlsLabel := "tls" + label
		e.serveIn(a, 443, "tcp", func(l net.Listener) {
			(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				e.hits[tlsLabel].Add(1)
				if r.URL.Path == "/echo" { // as the plain-HTTP servers do
					if label == "A" {
						select {
						case e.seen <- r.Header.Clone():
						default:
						}
					}
					w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
					fmt.Fprintf(w, "server=%s host=%s proto=%s\n", label, r.Host, r.Proto)
					r.Header.Write(w)
					return
				}
				fmt.Fprintf(w, "server=%s\n", label)
			})}).Serve(tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}}))
		})
	}
	e.serveIn(e.addrA, 7000, "tcp", func(l net.Listener) {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			e.hits["raw"].Add(1)
			c.Write([]byte("raw-hello\n"))
			c.Close()
		}
	})
	e.serveIn(e.addrA, 9999, "udp", nil)
	e.serveIn(e.addrA, 53, "dns", nil)
}

// serveIn starts a server bound inside the upstream namespace.
func (e *env) serveIn(a netip.Addr, port int, kind string, serve func(net.Listener)) {
	t := e.t
	addr := net.JoinHostPort(a.String(), fmt.Sprint(port))
	var l net.Listener
	var pc net.PacketConn
	must(t, network.InNamespace(e.upNS, func() (err error) {
		if kind == "tcp" {
			l, err = net.Listen("tcp4", addr)
		} else {
			pc, err = net.ListenPacket("udp4", addr)
		}
		return err
	}))
	switch kind {
	case "tcp":
		t.Cleanup(func() { l.Close() })
		go serve(l)
	case "udp":
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				e.hits["udp"].Add(1)
				pc.WriteTo(buf[:n], from)
			}
		}()
	case "dns":
		srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			e.hits["dns"].Add(1)
			m := new(dns.Msg)
			m.SetReply(r)
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(6, 6, 6, 6)})
			w.WriteMsg(m)
		})}
		t.Cleanup(func() { srv.Shutdown() })
		go srv.ActivateAndServe()
	}
}

func prefixNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}
}

func selfSigned(t testing.TB) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		DNSNames: []string{"allowed.test", "other.test", "second.test"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func tunAttach(fd uintptr, name string, flags uint16) error {
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:unix.IFNAMSIZ-1], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = flags
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(unix.TUNSETIFF), uintptr(unsafe.Pointer(&req[0]))); errno != 0 {
		return errno
	}
	return nil
}

// startGuest creates the guest namespace with a tap eth0 configured as the
// VM would be, and pumps frames between it and the sandbox's tap0.
func (e *env) startGuest() {
	t := e.t
	e.guestNS = newNamedNS(t, fmt.Sprintf("space-tg-%s", e.id))
	var gf *os.File
	must(t, network.InNamespace(e.guestNS, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		if err := tunAttach(uintptr(fd), "eth0", unix.IFF_TAP|unix.IFF_NO_PI); err != nil {
			unix.Close(fd)
			return err
		}
		gf = os.NewFile(uintptr(fd), "guest-eth0")
		return nil
	}))
	sf, err := e.sb.OpenTap(network.TapOptions{})
	must(t, err)
	t.Cleanup(func() { gf.Close(); sf.Close() })
	pumpFrames(gf, sf)

	nl := nlAt(t, e.guestNS)
	eth, err := nl.LinkByName("eth0")
	must(t, err)
	must(t, nl.LinkSetHardwareAddr(eth, network.GuestMAC))
	must(t, nl.AddrAdd(eth, &netlink.Addr{IPNet: prefixNet(network.GuestAddr, network.GuestPrefix.Bits())}))
	must(t, nl.AddrAdd(eth, &netlink.Addr{IPNet: prefixNet(netip.MustParseAddr("fd00::2"), 64), Flags: unix.IFA_F_NODAD}))
	must(t, nl.LinkSetUp(eth))
	lo, _ := nl.LinkByName("lo")
	must(t, nl.LinkSetUp(lo))
	must(t, nl.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: network.GatewayAddr.AsSlice()}))
	must(t, nl.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: prefixNet(netip.MustParseAddr("::"), 0), Gw: net.ParseIP("fd00::1")}))
}

// pumpFrames copies frames both ways between two taps, in userspace, as
// the VM's NIC would (one read and one write per frame), until either is
// closed.
func pumpFrames(a, b *os.File) {
	pump := func(dst, src *os.File) {
		buf := make([]byte, 65536)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return
			}
			dst.Write(buf[:n])
		}
	}
	go pump(a, b)
	go pump(b, a)
}

// dial opens a connection from inside the guest.
func (e *env) dial(ctx context.Context, network_, addr string) (net.Conn, error) {
	var c net.Conn
	err := network.InNamespace(e.guestNS, func() (err error) {
		d := net.Dialer{Timeout: 3 * time.Second}
		c, err = d.DialContext(ctx, network_, addr)
		return err
	})
	return c, err
}

// resolver is the guest's resolver, pointed at dnsServer.
func (e *env) resolver(dnsServer string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, nw, _ string) (net.Conn, error) {
		return e.dial(ctx, nw, dnsServer)
	}}
}

// client is an HTTP client in the guest using the platform DNS.
func (e *env) client() *http.Client {
	res := e.resolver(net.JoinHostPort(network.GatewayAddr.String(), "53"))
	tr := &http.Transport{
		DialContext: func(ctx context.Context, nw, addr string) (net.Conn, error) {
			host, port, _ := net.SplitHostPort(addr)
			if ip, err := netip.ParseAddr(host); err == nil {
				return e.dial(ctx, "tcp4", netip.AddrPortFrom(ip, 0).Addr().String()+":"+port)
			}
			ips, err := res.LookupNetIP(ctx, "ip4", host)
			if err != nil {
				return nil, err
			}
			return e.dial(ctx, "tcp4", net.JoinHostPort(ips[0].String(), port))
		},
		TLSClientConfig:   &tls.Config{RootCAs: e.caPool},
		DisableKeepAlives: false,
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}
