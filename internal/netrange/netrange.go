// Package netrange names the address ranges that are not the public
// internet, once, for every guard that refuses them on a tenant's word:
// sandbox egress (internal/egress) and template registry pulls
// (internal/template). Callers get copies; they may not change the lists.
package netrange

import (
	"net/netip"
	"slices"
)

// never are ranges no operator setting opens for a sandbox's egress.
var never = prefixes(
	"0.0.0.0/8",   // "this network", unspecified
	"127.0.0.0/8", // loopback
	"224.0.0.0/4", // multicast
	"240.0.0.0/4", // reserved, limited broadcast
	"::/128",      // unspecified
	"::1/128",     // loopback
	"ff00::/8",    // multicast
)

// private are every IANA special-purpose range that is not globally
// reachable and can hold a host a deployment runs (a node, a Pod or
// Service, an object store, a database, a cloud's metadata service). The
// documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24) are
// not in it: nothing is ever numbered there, so refusing them protects
// nothing. The benchmarking range 198.18.0.0/15 is: some networks number
// internal hosts there to stay clear of RFC 1918 (and some resolvers hand
// out fake answers from it).
var private = prefixes(
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

// metadata are cloud instance-metadata services (169.254.169.254: AWS,
// GCP, Azure, OpenStack, Oracle and others; fd00:ec2::254: AWS over IPv6;
// 100.100.100.200: Alibaba Cloud). They hand out the node's credentials.
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

// Never are loopback, unspecified, multicast and reserved ranges: nothing
// a tenant names may reach them, whatever an operator allows.
func Never() []netip.Prefix { return slices.Clone(never) }

// Private are the private, CGNAT, link-local, ULA and other
// special-purpose ranges an operator may open on purpose (egress's
// --egress-allow-private).
func Private() []netip.Prefix { return slices.Clone(private) }

// NotPublic is Never and Private together: everything that is not the
// public internet.
func NotPublic() []netip.Prefix { return slices.Concat(never, private) }

// Metadata are the cloud instance-metadata addresses.
func Metadata() []netip.Addr { return slices.Clone(metadata) }

// Contains reports whether any of ranges holds a (unmapped, zone dropped).
func Contains(ranges []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, p := range ranges {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}
