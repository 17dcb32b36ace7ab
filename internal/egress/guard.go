package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
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

// neverRanges no operator setting opens.
var neverRanges = prefixes(
	"0.0.0.0/8",   // "this network", unspecified
	"127.0.0.0/8", // loopback
	"224.0.0.0/4", // multicast
	"240.0.0.0/4", // reserved, limited broadcast
	"::/128",      // unspecified
	"::1/128",     // loopback
	"ff00::/8",    // multicast
)

// privateRanges are the networks refused unless the operator allows them
// (Config.AllowPrivate): every IANA special-purpose range that is not
// globally reachable and can hold a host a deployment runs (a node, a Pod
// or Service, an object store, a database, a cloud's metadata service). The
// documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24) are
// not in it: nothing is ever numbered there, so refusing them protects
// nothing. The benchmarking range 198.18.0.0/15 is: some networks number
// internal hosts there to stay clear of RFC 1918 (and some resolvers hand
// out fake answers from it).
var privateRanges = prefixes(
	"10.0.0.0/8",     // RFC 1918
	"100.64.0.0/10",  // CGNAT (RFC 6598), also tailnets and some Pod networks
	"169.254.0.0/16", // link-local, cloud metadata
	"172.16.0.0/12",  // RFC 1918
	"192.0.0.0/24",   // IETF protocol assignments
	"192.168.0.0/16", // RFC 1918
	"198.18.0.0/15",  // benchmarking (RFC 2544)
	"fc00::/7",       // unique local (ULA), AWS metadata fd00:ec2::254
	"fe80::/10",      // link-local
	"64:ff9b::/96",   // NAT64: embeds any IPv4 address
	"64:ff9b:1::/48", // local-use NAT64
	"2002::/16",      // 6to4: embeds any IPv4 address
)

// metadataAddrs are cloud instance-metadata services (169.254.169.254: AWS,
// GCP, Azure, OpenStack, Oracle and others; fd00:ec2::254: AWS over IPv6;
// 100.100.100.200: Alibaba Cloud). They hand out the node's credentials.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

// PrivateRanges are the ranges refused unless the operator allows them, and
// NeverRanges those refused whatever the operator says (besides this
// machine's addresses and any IPv6): for deployment tooling that mirrors
// them (a NetworkPolicy's exceptions).
func PrivateRanges() []netip.Prefix { return slices.Clone(privateRanges) }

// NeverRanges: see PrivateRanges.
func NeverRanges() []netip.Prefix { return slices.Clone(neverRanges) }

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

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
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
