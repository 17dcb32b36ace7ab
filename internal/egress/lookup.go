package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
)

// lookups is one sandbox's way to the host's resolver, which every sandbox
// shares: answers are cached (a bounded count of names, each for DNSTTL,
// the TTL the guest is told), concurrent lookups of one name are joined,
// and what still reaches the resolver is held to a rate, each lookup
// within LookupTimeout. Random names under an allowed wildcard are what
// the rate is for; the cache spares the rate for repeats.
type lookups struct {
	ttl     time.Duration
	timeout time.Duration
	rate    *rate.Limiter
	flights singleflight.Group

	mu    sync.Mutex
	cache *simplelru.LRU[string, lookupEntry]
}

type lookupEntry struct {
	addrs   []netip.Addr // nil: the name does not resolve
	expires time.Time
}

// Why a lookup gave no addresses: the DNS answer differs for each
// (NXDOMAIN, REFUSED, SERVFAIL).
var (
	errNoSuchName   = errors.New("name does not resolve")
	errLookupRate   = errors.New("lookup rate exceeded")
	errLookupFailed = errors.New("lookup failed")
)

func newLookups(cfg Config) *lookups {
	c, err := simplelru.NewLRU[string, lookupEntry](cfg.DNSCacheSize, nil)
	if err != nil { // only for a size New never lets through
		panic(err)
	}
	return &lookups{
		ttl: cfg.DNSTTL, timeout: cfg.LookupTimeout,
		rate:  rate.NewLimiter(rate.Limit(cfg.LookupRate), cfg.LookupBurst),
		cache: c,
	}
}

// cached is name's entry while it lives, and the time it has left.
func (l *lookups) cached(name string) (lookupEntry, time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.cache.Get(name)
	if !ok {
		return lookupEntry{}, 0, false
	}
	left := time.Until(e.expires)
	if left <= 0 {
		l.cache.Remove(name)
		return lookupEntry{}, 0, false
	}
	return e, left, true
}

func (l *lookups) store(name string, addrs []netip.Addr) {
	l.mu.Lock()
	l.cache.Add(name, lookupEntry{addrs: addrs, expires: time.Now().Add(l.ttl)})
	l.mu.Unlock()
}

// lookup returns name's IPv4 addresses as the host's resolver gives them
// and how long they may be held (at most DNSTTL), or errNoSuchName,
// errLookupRate (the sandbox's rate is spent: nothing was asked) or
// errLookupFailed (the resolver failed or took longer than LookupTimeout;
// not cached).
func (sb *sandbox) lookup(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	l := sb.lookups
	if e, left, ok := l.cached(name); ok {
		if e.addrs == nil {
			return nil, left, errNoSuchName
		}
		return e.addrs, left, nil
	}
	v, err, _ := l.flights.Do(name, func() (any, error) {
		if !l.rate.Allow() {
			sb.svc.lookupRate.Exhausted()
			return nil, errLookupRate
		}
		ctx, cancel := context.WithTimeout(ctx, l.timeout)
		defer cancel()
		addrs, err := sb.svc.cfg.Resolver.LookupNetIP(ctx, "ip4", name)
		var dnsErr *net.DNSError
		switch {
		case err == nil && len(addrs) > 0:
			l.store(name, addrs)
			return addrs, nil
		case err == nil, errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			l.store(name, nil)
			return nil, errNoSuchName
		default:
			return nil, errLookupFailed
		}
	})
	if err != nil {
		return nil, l.ttl, err
	}
	return v.([]netip.Addr), l.ttl, nil
}
