package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/network"
)

// pumpedDirect is the frame pump of startGuest without the proxy: a client
// namespace and a server namespace, each with a tap eth0, their frames
// pumped between them by pumpFrames, and an HTTP server in the server
// namespace answering as upstream A does. A GET through it pays what the
// guest path pays for the pump (two taps, two userspace copies per frame)
// and nothing for the sandbox namespace, nftables or the proxy.
type pumpedDirect struct {
	url    string
	client *http.Client
	// tlsURL is the same server over TLS (the harness's self-signed
	// certificate for allowed.test, which client trusts).
	tlsURL string
}

var (
	pumpClientAddr = netip.MustParseAddr("192.0.2.1")
	pumpServerAddr = netip.MustParseAddr("192.0.2.2")
)

func newPumpedDirect(t testing.TB, id string) *pumpedDirect {
	t.Helper()
	cns := newNamedNS(t, fmt.Sprintf("space-tpc-%s", id))
	sns := newNamedNS(t, fmt.Sprintf("space-tps-%s", id))
	var taps []*os.File
	for i, ns := range []string{cns, sns} {
		addr := []netip.Addr{pumpClientAddr, pumpServerAddr}[i]
		var f *os.File
		must(t, network.InNamespace(ns, func() error {
			fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
			if err != nil {
				return err
			}
			if err := tunAttach(uintptr(fd), "eth0", unix.IFF_TAP|unix.IFF_NO_PI); err != nil {
				unix.Close(fd)
				return err
			}
			f = os.NewFile(uintptr(fd), "eth0")
			return nil
		}))
		taps = append(taps, f)
		nl := nlAt(t, ns)
		eth, err := nl.LinkByName("eth0")
		must(t, err)
		must(t, nl.AddrAdd(eth, &netlink.Addr{IPNet: prefixNet(addr, 24)}))
		must(t, nl.LinkSetUp(eth))
	}
	t.Cleanup(func() { taps[0].Close(); taps[1].Close() })
	pumpFrames(taps[0], taps[1])

	var l net.Listener
	must(t, network.InNamespace(sns, func() (err error) {
		l, err = net.Listen("tcp4", netip.AddrPortFrom(pumpServerAddr, 80).String())
		return err
	}))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
		fmt.Fprintf(w, "server=A host=%s\n", r.Host)
		r.Header.Write(w)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	var tl net.Listener
	must(t, network.InNamespace(sns, func() (err error) {
		tl, err = net.Listen("tcp4", netip.AddrPortFrom(pumpServerAddr, 443).String())
		return err
	}))
	cert := selfSigned(t)
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	tsrv := &http.Server{Handler: srv.Handler}
	go tsrv.Serve(tls.NewListener(tl, &tls.Config{Certificates: []tls.Certificate{cert}}))
	t.Cleanup(func() { tsrv.Close() })

	tr := &http.Transport{DialContext: func(ctx context.Context, nw, addr string) (net.Conn, error) {
		var c net.Conn
		err := network.InNamespace(cns, func() (err error) {
			d := net.Dialer{Timeout: 3 * time.Second}
			c, err = d.DialContext(ctx, nw, addr)
			return err
		})
		return c, err
	}, TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "allowed.test"}}
	t.Cleanup(tr.CloseIdleConnections)
	return &pumpedDirect{url: "http://" + pumpServerAddr.String() + "/", tlsURL: "https://" + pumpServerAddr.String() + "/",
		client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// TestPumpedDirect checks the baseline BenchmarkProxyOverhead compares the
// proxy with: GETs cross the pump and reach the server.
func TestPumpedDirect(t *testing.T) {
	requireNetAdmin(t)
	p := newPumpedDirect(t, fmt.Sprintf("t%d-pd", os.Getpid()))
	for i := 0; i < 4; i++ {
		url := p.url
		if i%2 == 1 {
			url = p.tlsURL
		}
		resp, err := p.client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
}
