package egress

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// guard refuses destinations no policy may open: loopback, link-local
// (cloud metadata lives at 169.254.169.254), multicast, unspecified and
// broadcast addresses, every address of this machine, and the configured
// extra prefixes (the sandbox link network, the control plane's network).
type guard struct {
	extra []netip.Prefix

	mu      sync.Mutex
	local   map[netip.Addr]bool
	fetched time.Time
}

// localTTL bounds how stale the host's own address list may be; a new
// interface address is refused within this long.
const localTTL = 2 * time.Second

func (g *guard) forbidden(a netip.Addr) bool {
	a = a.Unmap()
	if !a.Is4() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsMulticast() || a.IsUnspecified() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) ||
		a.As4()[0] == 0 {
		return true
	}
	for _, p := range g.extra {
		if p.Contains(a) {
			return true
		}
	}
	return g.isLocal(a)
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
