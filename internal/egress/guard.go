package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/netrange"
)

// The guard's audit rules: what a tenant learns when the guard, not its
// policy, refused an address. Neither names the operator's ranges.
const (
	whyForbidden = "forbidden address"
	whyPrivate   = "private address"
)

// guard refuses destinations the operator decides, whatever a tenant's
// policy says (an explicit allow rule included):
//
//   - never reachable: loopback, unspecified, multicast, reserved and
//     broadcast addresses, any IPv6 (the proxy carries IPv4 only), every
//     address of this machine, and the extra prefixes (the sandbox link
//     network, the operator's --egress-deny);
//   - private: RFC 1918, CGNAT, link-local, the other special-purpose
//     ranges nothing on the internet answers at, and their IPv6
//     counterparts; reachable only inside a prefix of allowPrivate (the
//     operator's --egress-allow-private). A cloud metadata address opens
//     only when allowPrivate lists exactly it: a wide prefix (a lab's
//     169.254.0.0/16, a tailnet's 100.64.0.0/10) never opens it by accident.
//
// Every address is judged where it is connected to (checkedDial), after
// the platform resolved it, so a name that resolves to a private address,
// or an answer that changes between a check and the dial, gains nothing.
type guard struct {
	extra        []netip.Prefix
	allowPrivate []netip.Prefix

	mu      sync.Mutex
	local   map[netip.Addr]bool
	fetched time.Time
}

// localTTL bounds how stale the host's own address list may be; a new
// interface address is refused within this long.
const localTTL = 2 * time.Second

// The ranges the guard refuses are netrange's: Never whatever the
// operator says, Private unless allowPrivate opens them.
var (
	neverRanges   = netrange.Never()
	privateRanges = netrange.Private()
	metadataAddrs = netrange.Metadata()
)

// ParsePrefixes reads an operator's list of CIDRs ("10.0.0.0/8",
// "fd00::/8") or single addresses, each element possibly a comma-separated
// list itself, as flags give them.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range list {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			p, err := netip.ParsePrefix(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil || a.Zone() != "" {
					return nil, fmt.Errorf("%q is not a CIDR or an address: %w", s, errdefs.ErrInvalidArgument)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			out = append(out, unmapPrefix(p))
		}
	}
	return out, nil
}

func newGuard(extra, allowPrivate []netip.Prefix) *guard {
	g := &guard{extra: make([]netip.Prefix, 0, len(extra)), allowPrivate: make([]netip.Prefix, 0, len(allowPrivate))}
	for _, p := range extra {
		g.extra = append(g.extra, unmapPrefix(p))
	}
	for _, p := range allowPrivate {
		g.allowPrivate = append(g.allowPrivate, unmapPrefix(p))
	}
	return g
}

// unmapPrefix turns ::ffff:10.0.0.0/104 into 10.0.0.0/8: addresses are
// judged unmapped.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

// refuse says why a may not be connected to: "" when it may,
// whyForbidden or whyPrivate otherwise.
func (g *guard) refuse(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if !a.Is4() || containsAny(neverRanges, a) || containsAny(g.extra, a) || g.isLocal(a) {
		return whyForbidden
	}
	if containsAny(privateRanges, a) && !g.privateAllowed(a) {
		return whyPrivate
	}
	return ""
}

func (g *guard) privateAllowed(a netip.Addr) bool {
	for _, m := range metadataAddrs {
		if a == m {
			for _, p := range g.allowPrivate {
				if p.IsSingleIP() && p.Addr() == a {
					return true
				}
			}
			return false
		}
	}
	return containsAny(g.allowPrivate, a)
}

func containsAny(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (g *guard) isLocal(a netip.Addr) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.local == nil || time.Since(g.fetched) > localTTL {
		local := map[netip.Addr]bool{}
		addrs, err := net.InterfaceAddrs()
		if err != nil && g.local != nil {
			return g.local[a]
		}
		for _, ad := range addrs {
			if n, ok := ad.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					local[ip.Unmap()] = true
				}
			}
		}
		g.local, g.fetched = local, time.Now()
	}
	return g.local[a]
}

// errGuarded is the cause of a dial the guard refused.
var errGuarded = fmt.Errorf("egress guard refused the address: %w", errdefs.ErrPermissionDenied)

// checkedDial wraps dial so that every upstream connection is judged by
// the address it is made to: addr must be an IP literal (a name would be
// resolved again inside dial, out of the guard's sight) that the guard
// allows.
func (g *guard) checkedDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := g.check(addr); err != nil {
			return nil, err
		}
		return dial(ctx, network, addr)
	}
}

// control is a net.Dialer's Control: the same judgement on the socket
// address connect(2) is about to be given, whatever the caller passed.
func (g *guard) control(_, address string, _ syscall.RawConn) error { return g.check(address) }

func (g *guard) check(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%q is not an address: %w", address, errGuarded)
	}
	if why := g.refuse(ap.Addr()); why != "" {
		return fmt.Errorf("%s is a %s: %w", address, why, errGuarded)
	}
	return nil
}
