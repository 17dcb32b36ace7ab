package template

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/netrange"
)

// Registry pulls are made on a tenant's word: an image reference names any
// host and port. Without a policy the build host would connect wherever a
// tenant says, its loopback and private networks included (SSRF), and the
// differing errors would map what listens there. So every connection a pull
// makes, redirects, token endpoints and blob CDNs included, is checked where
// it is dialled, against the address actually connected to: a name that
// resolves to loopback, or a DNS answer that changes between check and
// connect, gains nothing.

// unreachableMsg is all a tenant learns when a registry cannot be used for
// a reason other than its own well-formed answer: nothing listening,
// something that is no registry, a TLS failure and a refusal by policy look
// the same. The cause goes to the server log.
const unreachableMsg = "%s: registry unreachable or not allowed"

// refusedRanges are the networks no tenant pull may reach unless its
// registry is allowed by name: anything that is not the public internet.
var refusedRanges = netrange.NotPublic()

// errRefused is the cause of a dial the policy refused.
var errRefused = errors.New("refused by the template registry policy")

// registryPolicy decides which registries tenant pulls may connect to and
// carries the HTTP transport that enforces it.
type registryPolicy struct {
	allow     map[string]bool // "host:port" or "host" (any port), lower case
	transport *http.Transport

	// proxyFor picks the proxy of a request (http.ProxyFromEnvironment).
	proxyFor func(*http.Request) (*url.URL, error)
	proxies  sync.Map // "host:port" of proxies proxyFor named: the operator's, dialled freely

	// localAddrs lists the host's own addresses (a field so tests can stand in).
	localAddrs func() ([]net.Addr, error)
}

// parseRegistryAllow checks allow-list entries ("host" or "host:port").
func parseRegistryAllow(entries []string) (map[string]bool, error) {
	allow := map[string]bool{}
	for _, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" {
			continue
		}
		if strings.Contains(e, "/") || strings.ContainsAny(e, " \t@?#") {
			return nil, fmt.Errorf("template: registry %q: want host or host:port, no scheme or path: %w", e, errdefs.ErrInvalidArgument)
		}
		u, err := url.Parse("//" + e)
		if err != nil || u.Host != e || u.Hostname() == "" || u.User != nil {
			return nil, fmt.Errorf("template: registry %q: want host or host:port: %w", e, errdefs.ErrInvalidArgument)
		}
		if u.Port() != "" {
			allow[net.JoinHostPort(u.Hostname(), u.Port())] = true
		} else {
			allow[u.Hostname()] = true
		}
	}
	return allow, nil
}

func newRegistryPolicy(entries []string) (*registryPolicy, error) {
	allow, err := parseRegistryAllow(entries)
	if err != nil {
		return nil, err
	}
	p := &registryPolicy{allow: allow, proxyFor: http.ProxyFromEnvironment, localAddrs: net.InterfaceAddrs}
	// go-containerregistry's default transport, but dialling through the policy.
	p.transport = &http.Transport{
		Proxy:                 p.proxy,
		DialContext:           p.dial,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   50,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
	}
	return p, nil
}

// allowed reports whether the operator named the registry at hostport
// (the address the transport dials: host and explicit or default port).
func (p *registryPolicy) allowed(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	hostport, host = strings.ToLower(hostport), strings.ToLower(host)
	return p.allow[hostport] || p.allow[host]
}

// dial connects to addr, checking each address it resolves to right before
// connecting, unless addr is an allowed registry or the operator's proxy.
func (p *registryPolicy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if _, isProxy := p.proxies.Load(strings.ToLower(addr)); !isProxy && !p.allowed(addr) {
		d.Control = func(_, address string, _ syscall.RawConn) error { return p.check(address) }
	}
	return d.DialContext(ctx, network, addr)
}

// check refuses a resolved "ip:port" that is not a public address.
func (p *registryPolicy) check(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%s: %w", address, errRefused)
	}
	return p.checkIP(ap.Addr(), address)
}

func (p *registryPolicy) checkIP(ip netip.Addr, what string) error {
	if why := p.refuse(ip); why != "" {
		return fmt.Errorf("%s is %s: %w", what, why, errRefused)
	}
	return nil
}

// refuse says why ip may not be reached ("" when it may).
func (p *registryPolicy) refuse(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	for _, r := range refusedRanges {
		if r.Contains(ip) {
			return "in " + r.String()
		}
	}
	addrs, err := p.localAddrs()
	if err != nil {
		return "unverifiable: the host's addresses cannot be listed"
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if own, ok := netip.AddrFromSlice(n.IP); ok && own.Unmap() == ip {
				return "an address of this host"
			}
		}
	}
	return ""
}

// proxy picks the environment's proxy for req. The proxy, not this host,
// then connects to the registry, so the dial-time check cannot see the
// destination: it is checked here by what its name resolves to (the best a
// client of a proxy can do), and the proxy's own address is dialled freely.
func (p *registryPolicy) proxy(req *http.Request) (*url.URL, error) {
	u, err := p.proxyFor(req)
	if u == nil || err != nil {
		return u, err
	}
	dest := canonicalAddr(req.URL)
	if !p.allowed(dest) {
		host, _, _ := net.SplitHostPort(dest)
		ips, err := net.DefaultResolver.LookupNetIP(req.Context(), "ip", host)
		if err != nil {
			return nil, err
		}
		for _, ip := range ips {
			if err := p.checkIP(ip, dest+" via proxy ("+ip.String()+")"); err != nil {
				return nil, err
			}
		}
	}
	p.proxies.Store(strings.ToLower(canonicalAddr(u)), true)
	return u, nil
}

// canonicalAddr is u's "host:port", with the scheme's default port.
func canonicalAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443", "socks5": "1080", "socks5h": "1080"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// pullErr classifies a failed registry request for the tenant. Only a
// registry's own answer to a request for the image (not found, access
// refused) is named; anything else gets the one generic message. The cause
// rides along for the server log (the API logs it, never shows it).
func pullErr(ref string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("template: %s: %w", ref, errdefs.ErrCancelled)
	}
	var terr *transport.Error
	if errors.As(err, &terr) && !errors.Is(err, errRefused) && terr.Request != nil && terr.Request.URL.Path != "/v2/" {
		switch terr.StatusCode {
		case http.StatusNotFound:
			return errdefs.New(errdefs.ErrInvalidArgument, "image %q was not found in its registry", ref).WithCause(err)
		case http.StatusUnauthorized, http.StatusForbidden:
			return errdefs.New(errdefs.ErrPermissionDenied, "the registry refused access to %q", ref).WithCause(err)
		}
	}
	return unreachable(fmt.Sprintf("%q", ref), err)
}

// unreachable is the generic failure; what names the image or its layer.
func unreachable(what string, err error) error {
	return errdefs.New(errdefs.ErrUnavailable, unreachableMsg, what).WithCause(err)
}

// isNetErr reports whether err comes from talking to a registry rather
// than from what it sent: such errors reading the layers or config of a
// pulled image get the generic message too.
func isNetErr(err error) bool {
	var (
		nerr net.Error
		uerr *url.Error
	)
	return errors.Is(err, errRefused) || errors.As(err, &nerr) || errors.As(err, &uerr)
}
