// Package egress decides and carries everything a sandbox's guest sends out:
// a DNS server that answers only names the policy could allow, a transparent
// proxy that matches HTTP by Host and TLS by SNI (without terminating TLS)
// and other TCP by CIDR, always connecting to the address the platform
// resolved rather than one the guest chose, injection of credentials into
// plain-HTTP requests for matching domains with the secret scrubbed from what
// flows back, per-sandbox budgets on what a guest can make the host hold or
// do (budgets.go), and an audit ring per sandbox.
// Whatever a policy says, it never connects to this host, loopback or the
// operator's denied ranges, nor to a private range (RFC 1918, CGNAT,
// link-local, cloud metadata…) the operator has not allowed (guard.go),
// judging the address it actually dials.
//
// With a per-deployment CA (Config.CA, see LoadOrCreateCA) it also injects
// into HTTPS: TLS whose SNI names a domain with inject rules is terminated
// with a leaf the CA signs and re-originated to an upstream verified
// against Config.UpstreamRoots; every other TLS connection still passes
// through untouched.
//
// It does not create namespaces or firewall rules (package network does and
// hands it listeners bound inside the sandbox namespace), and it never stores
// secret values: they are resolved through a caller's function per request.
package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/space-sandbox/space/internal/budget"
	"github.com/space-sandbox/space/internal/errdefs"
)

// Resolver looks names up for the platform; *net.Resolver satisfies it and
// net.DefaultResolver (which reads /etc/hosts) is the default.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// SecretFunc returns the current value of the named secret.
type SecretFunc func(ctx context.Context, name string) (string, error)

// Config configures a Service. The zero value works.
type Config struct {
	Logger   *slog.Logger
	Resolver Resolver
	// Dial connects to upstreams from the worker's namespace (default
	// net.Dialer with a 10 s timeout). It is only ever given addresses the
	// guard allows, as IP literals; the default also checks the socket
	// address it connects to.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Forbidden are prefixes no policy may reach, on top of loopback,
	// multicast, reserved and this machine's own addresses, whatever
	// AllowPrivate says. Pass the sandbox link network, the control
	// plane's network and the cluster's Pod and Service ranges here
	// (spaced's --egress-deny).
	Forbidden []netip.Prefix
	// AllowPrivate are the parts of the private ranges (netrange.Private:
	// RFC 1918, CGNAT, link-local, ULA, benchmarking…) sandboxes may reach,
	// as their policies allow (spaced's --egress-allow-private). Nil: none,
	// whatever a tenant's policy says. A cloud metadata address opens only
	// when listed exactly (169.254.169.254/32).
	AllowPrivate []netip.Prefix
	// MaxConns caps a sandbox's concurrent proxied connections (default 256).
	MaxConns int
	// MaxHeaderBytes bounds an HTTP request's header from the guest and a
	// response's header from an upstream (default 64 KiB).
	MaxHeaderBytes int
	// HeaderTimeout bounds the read of a request's header once its first
	// byte has come (default 10 s).
	HeaderTimeout time.Duration
	// DNSQueries caps a sandbox's DNS queries being answered at once, over
	// UDP and TCP (default 32).
	DNSQueries int
	// DNSTCPConns caps a sandbox's open DNS-over-TCP connections (default 8).
	DNSTCPConns int
	// DNSCacheSize is how many names each sandbox's lookup cache keeps
	// (default 256); an entry lives DNSTTL.
	DNSCacheSize int
	// LookupRate and LookupBurst bound a sandbox's lookups that reach the
	// host's resolver (cache misses), per second (default 20, burst 50).
	LookupRate  float64
	LookupBurst int
	// LookupTimeout bounds one lookup by the host's resolver (default 3 s).
	LookupTimeout time.Duration
	// Budgets are the metrics the per-sandbox budgets are counted in
	// (space_guest_budget_*; nil: counted, served nowhere).
	Budgets *budget.Metrics
	// AuditSize is how many records each sandbox keeps (default 1024).
	AuditSize int
	// PeekTimeout bounds the wait for a guest's first bytes (default 10 s).
	PeekTimeout time.Duration
	// DNSTTL is the TTL of DNS answers (default 5 s, so policy changes bite soon).
	DNSTTL time.Duration
	// CA, when set, turns on HTTPS credential injection: TLS connections
	// whose SNI names a domain with inject rules are terminated with a leaf
	// it signs (see TrustedCA for the guest's side). Nil: TLS always passes
	// through untouched and inject rules apply to plain HTTP only.
	CA *CA
	// UpstreamRoots verify upstreams of intercepted connections (default:
	// the system store).
	UpstreamRoots *x509.CertPool
}

// Listeners are the sockets the guest's traffic is redirected to (see
// network.Sandbox.Listen). The Service closes them on Detach.
type Listeners struct {
	Proxy  net.Listener
	DNSTCP net.Listener
	DNSUDP net.PacketConn
}

// Service runs the egress path of every sandbox on a worker.
type Service struct {
	cfg   Config
	log   *slog.Logger
	guard *guard
	roots *x509.CertPool // nil: the system store
	budgets

	mu        sync.Mutex
	sandboxes map[string]*sandbox
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Resolver == nil {
		// The pure Go resolver (files, then DNS): a lookup ends when its
		// context does, where one through the C library would hold a
		// thread past LookupTimeout.
		cfg.Resolver = &net.Resolver{PreferGo: true}
	}
	g := newGuard(cfg.Forbidden, cfg.AllowPrivate)
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: 10 * time.Second, Control: g.control}
		cfg.Dial = d.DialContext
	}
	cfg.Dial = g.checkedDial(cfg.Dial)
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 256
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 64 << 10
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = 10 * time.Second
	}
	if cfg.DNSQueries <= 0 {
		cfg.DNSQueries = 32
	}
	if cfg.DNSTCPConns <= 0 {
		cfg.DNSTCPConns = 8
	}
	if cfg.DNSCacheSize <= 0 {
		cfg.DNSCacheSize = 256
	}
	if cfg.LookupRate <= 0 {
		cfg.LookupRate = 20
	}
	if cfg.LookupBurst <= 0 {
		cfg.LookupBurst = 50
	}
	if cfg.LookupTimeout <= 0 {
		cfg.LookupTimeout = 3 * time.Second
	}
	if cfg.AuditSize <= 0 {
		cfg.AuditSize = 1024
	}
	if cfg.PeekTimeout <= 0 {
		cfg.PeekTimeout = 10 * time.Second
	}
	if cfg.DNSTTL <= 0 {
		cfg.DNSTTL = 5 * time.Second
	}
	return &Service{cfg: cfg, log: cfg.Logger, guard: g, roots: cfg.UpstreamRoots,
		budgets: newBudgets(cfg), sandboxes: map[string]*sandbox{}}
}

// TrustedCA is the PEM certificate guests must trust for HTTPS credential
// injection, or nil when it is off. It never includes the key.
func (s *Service) TrustedCA() []byte {
	if s == nil || s.cfg.CA == nil {
		return nil
	}
	return s.cfg.CA.CertPEM()
}

// sandbox is one attached sandbox.
type sandbox struct {
	id      string
	svc     *Service
	log     *slog.Logger
	rules   atomic.Pointer[rules]
	secrets SecretFunc
	audit   *ring
	ls      Listeners
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	lookups *lookups

	mu       sync.Mutex
	conns    map[*proxyConn]struct{}
	dnsConns map[net.Conn]struct{}
}

// Attach starts serving sandbox id's listeners under policy p. secrets
// resolves ${secret:NAME} references at request time (nil: none resolve).
func (s *Service) Attach(ctx context.Context, id string, ls Listeners, p Policy, secrets SecretFunc) error {
	r, err := compile(p)
	if err != nil {
		return err
	}
	if ls.Proxy == nil || ls.DNSTCP == nil || ls.DNSUDP == nil {
		return fmt.Errorf("egress attach %s: all listeners are required: %w", id, errdefs.ErrInvalidArgument)
	}
	if secrets == nil {
		secrets = func(ctx context.Context, name string) (string, error) {
			return "", fmt.Errorf("secret %q: %w", name, errdefs.ErrNotFound)
		}
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sb := &sandbox{
		id: id, svc: s, log: s.log.With("sandbox", id), secrets: secrets,
		audit: newRing(s.cfg.AuditSize), ls: ls, ctx: sctx, cancel: cancel,
		lookups: newLookups(s.cfg), conns: map[*proxyConn]struct{}{}, dnsConns: map[net.Conn]struct{}{},
	}
	sb.rules.Store(r)
	s.mu.Lock()
	if _, dup := s.sandboxes[id]; dup {
		s.mu.Unlock()
		cancel()
		return fmt.Errorf("egress for sandbox %s: %w", id, errdefs.ErrConflict)
	}
	s.sandboxes[id] = sb
	s.mu.Unlock()
	sb.wg.Add(3)
	go func() { defer sb.wg.Done(); sb.serveProxy() }()
	go func() { defer sb.wg.Done(); sb.serveDNSUDP(ls.DNSUDP) }()
	go func() { defer sb.wg.Done(); sb.serveDNSTCP(ls.DNSTCP) }()
	return nil
}

func (s *Service) get(id string) (*sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("egress for sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return sb, nil
}

// SetPolicy replaces sandbox id's policy at once: new connections, requests
// and queries see it immediately, and open connections it no longer allows
// are closed.
func (s *Service) SetPolicy(ctx context.Context, id string, p Policy) error {
	r, err := compile(p)
	if err != nil {
		return err
	}
	sb, err := s.get(id)
	if err != nil {
		return err
	}
	sb.rules.Store(r)
	sb.mu.Lock()
	var stale []*proxyConn
	for c := range sb.conns {
		if !c.stillAllowed(r) {
			stale = append(stale, c)
		}
	}
	sb.mu.Unlock()
	for _, c := range stale {
		c.kill()
	}
	sb.log.InfoContext(ctx, "egress policy replaced", "closed", len(stale))
	return nil
}

// Log returns sandbox id's audit records, oldest first.
func (s *Service) Log(id string) ([]Record, error) {
	sb, err := s.get(id)
	if err != nil {
		return nil, err
	}
	return sb.audit.snapshot(), nil
}

// Detach stops serving sandbox id: closes its listeners and connections and
// waits for its goroutines. Safe to call twice.
func (s *Service) Detach(ctx context.Context, id string) error {
	s.mu.Lock()
	sb, ok := s.sandboxes[id]
	delete(s.sandboxes, id)
	s.mu.Unlock()
	if !ok {
		return nil
	}
	sb.cancel()
	err := errors.Join(sb.ls.Proxy.Close(), sb.ls.DNSTCP.Close(), sb.ls.DNSUDP.Close())
	sb.mu.Lock()
	for c := range sb.conns {
		c.kill()
	}
	for c := range sb.dnsConns {
		c.Close()
	}
	sb.mu.Unlock()
	sb.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("egress detach %s: %w", id, errors.Join(errdefs.ErrInternal, err))
	}
	return nil
}

// Close detaches every sandbox.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	ids := make([]string, 0, len(s.sandboxes))
	for id := range s.sandboxes {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, s.Detach(ctx, id))
	}
	return errors.Join(errs...)
}

func (sb *sandbox) record(r Record) *Record {
	r.Time, r.Sandbox = time.Now().UTC(), sb.id
	sb.log.Debug("egress", "kind", r.Kind, "dest", r.Destination, "allowed", r.Allowed, "rule", r.Rule)
	return sb.audit.add(r)
}
