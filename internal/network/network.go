// Package network owns each sandbox's network namespace: the namespace itself
// (named space-<sandbox id>), the tap the VM attaches to, the fixed addresses
// every guest sees, and the nftables ruleset that denies everything except the
// path to the egress proxy and DNS listening inside that namespace. It keeps a
// pool of ready namespaces so creating a sandbox does not wait for one.
//
// It does not decide what a guest may reach: that is the egress package, whose
// listeners are opened inside the namespace with ListenTCP/ListenUDP. It does
// not touch host-wide firewall state: nothing routes out of a sandbox
// namespace, so no host rules are needed.
package network

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/space-sandbox/space/internal/errdefs"
)

// The addresses every guest sees, identical in every sandbox so a snapshot
// restores into any namespace unchanged.
var (
	// GuestPrefix is the tap's link network.
	GuestPrefix = netip.MustParsePrefix("172.31.0.0/30")
	// GatewayAddr is the namespace side of the tap: the guest's default
	// route and its DNS server.
	GatewayAddr = netip.MustParseAddr("172.31.0.1")
	// GuestAddr is the address the guest configures on its interface.
	GuestAddr = netip.MustParseAddr("172.31.0.2")
	// GatewayMAC is the tap's MAC, fixed so a restored guest's ARP cache
	// stays right.
	GatewayMAC = net.HardwareAddr{0x02, 0x53, 0x50, 0x00, 0x00, 0x01}
	// GuestMAC is the MAC to give the VM's NIC (virtio-net-device,mac=...).
	GuestMAC = net.HardwareAddr{0x02, 0x53, 0x50, 0x00, 0x00, 0x02}
)

// TapName is the name of the VM's tap inside every sandbox namespace.
const TapName = "tap0"

// NamePrefix begins the name of every namespace this package creates:
// space-<instance>-<sandbox id>, and space-<instance>-pool-… for pooled ones.
const NamePrefix = "space-"

// Config configures a Manager. The zero value works.
type Config struct {
	Logger *slog.Logger
	// Instance tells apart the namespaces of several workers on one host
	// (e.g. a short hash of the data dir): a worker only ever reaps its own.
	// Letters and digits (anything else is hashed); empty means "0".
	Instance string
	// PoolSize is how many ready namespaces to keep (default 2; -1 for none).
	PoolSize int
	// ProxyPort is the port, inside the namespace, that guest TCP is
	// redirected to (default 15001).
	ProxyPort uint16
	// DNSPort is the port, inside the namespace, that guest DNS is
	// redirected to (default 53).
	DNSPort uint16
}

// Manager creates, pools and removes sandbox namespaces.
//
// No channel send here can block, and none is made under a lock: only the
// filler sends to pool, and only when it has room; kick's send to refill
// gives up when a request is already pending.
type Manager struct {
	cfg  Config
	log  *slog.Logger
	pool chan string // ready namespaces

	seq       atomic.Uint64
	refill    chan struct{} // capacity 1: the pool wants topping up
	done      chan struct{} // closed by Close
	closeOnce sync.Once
	stopped   chan struct{} // closed when the filler has returned
}

// Sandbox is one sandbox's namespace.
type Sandbox struct {
	ID   string
	Name string // namespace name: space-<instance>-<ID>
	cfg  Config
}

// Path is the namespace's bind-mount path, usable with InNamespace or nsenter.
func (s *Sandbox) Path() string { return NamespacePath(s.Name) }

// ProxyPort and DNSPort are the in-namespace ports the egress listeners must bind.
func (s *Sandbox) ProxyPort() uint16 { return s.cfg.ProxyPort }

// DNSPort is the port guest DNS is redirected to inside the namespace.
func (s *Sandbox) DNSPort() uint16 { return s.cfg.DNSPort }

var (
	idRE       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,100}$`)
	instanceRE = regexp.MustCompile(`^[A-Za-z0-9]{1,16}$`)
)

// prefix begins the names of this manager's namespaces.
func (m *Manager) prefix() string { return NamePrefix + m.cfg.Instance + "-" }

func (m *Manager) poolPrefix() string { return m.prefix() + "pool-" }

// NameOf is the namespace name of sandbox id.
func (m *Manager) NameOf(id string) string { return m.prefix() + id }

// New returns a manager and starts filling its pool in the background.
// Close stops it and removes the pooled namespaces.
func New(ctx context.Context, cfg Config) *Manager {
	switch {
	case cfg.Instance == "":
		cfg.Instance = "0"
	case !instanceRE.MatchString(cfg.Instance):
		cfg.Instance = fmt.Sprintf("%x", sha256.Sum256([]byte(cfg.Instance)))[:8]
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 2
	}
	if cfg.PoolSize < 0 {
		cfg.PoolSize = 0
	}
	if cfg.ProxyPort == 0 {
		cfg.ProxyPort = 15001
	}
	if cfg.DNSPort == 0 {
		cfg.DNSPort = 53
	}
	m := &Manager{
		cfg: cfg, log: cfg.Logger,
		pool:    make(chan string, cfg.PoolSize),
		refill:  make(chan struct{}, 1),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go m.fill(context.WithoutCancel(ctx))
	m.kick()
	return m
}

func (m *Manager) kick() {
	select {
	case m.refill <- struct{}{}:
	default: // a request is pending already
	}
}

func (m *Manager) fill(ctx context.Context) {
	defer close(m.stopped)
	for {
		select {
		case <-m.done:
			return
		case <-m.refill:
		}
		for len(m.pool) < cap(m.pool) {
			name := fmt.Sprintf("%s%d-%d-%d", m.poolPrefix(), os.Getpid(), time.Now().UnixNano()%1e6, m.seq.Add(1))
			if err := m.build(name); err != nil {
				m.log.WarnContext(ctx, "network: pool namespace", "err", err)
				break
			}
			select {
			case <-m.done: // Close drains the pool once this returns
				_ = deleteNamed(name)
				return
			case m.pool <- name: // never full: only this loop sends
			default:
				_ = deleteNamed(name)
			}
		}
	}
}

// build creates a namespace named name with the tap, addresses, sysctls and rules.
func (m *Manager) build(name string) error {
	err := createNamed(name, func() error {
		for _, kv := range [][2]string{
			{"net.ipv6.conf.all.disable_ipv6", "1"},
			{"net.ipv6.conf.default.disable_ipv6", "1"},
			{"net.ipv4.ip_forward", "0"},
			{"net.ipv4.conf.all.route_localnet", "0"},
		} {
			if err := writeSysctl(kv[0], kv[1]); err != nil {
				return err
			}
		}
		if err := createTap(TapName); err != nil {
			return err
		}
		return writeSysctl("net.ipv6.conf."+TapName+".disable_ipv6", "1")
	})
	if err != nil {
		return err
	}
	if err := m.configure(name); err != nil {
		return errors.Join(err, deleteNamed(name))
	}
	return nil
}

func (m *Manager) configure(name string) error {
	h, err := netns.GetFromPath(NamespacePath(name))
	if err != nil {
		return fmt.Errorf("open netns: %w", errors.Join(errdefs.ErrInternal, err))
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return fmt.Errorf("netlink in netns: %w", errors.Join(errdefs.ErrInternal, err))
	}
	defer nl.Close()
	lo, err := nl.LinkByName("lo")
	if err == nil {
		err = nl.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("lo up: %w", errors.Join(errdefs.ErrInternal, err))
	}
	tap, err := nl.LinkByName(TapName)
	if err != nil {
		return fmt.Errorf("find tap: %w", errors.Join(errdefs.ErrInternal, err))
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: GatewayAddr.AsSlice(), Mask: net.CIDRMask(GuestPrefix.Bits(), 32)}}
	for _, step := range []func() error{
		func() error { return nl.LinkSetHardwareAddr(tap, GatewayMAC) },
		func() error { return nl.AddrAdd(tap, addr) },
		func() error { return nl.LinkSetUp(tap) },
	} {
		if err := step(); err != nil {
			return fmt.Errorf("configure tap: %w", errors.Join(errdefs.ErrInternal, err))
		}
	}
	return installRules(int(h), m.cfg.ProxyPort, m.cfg.DNSPort)
}

// Acquire returns the namespace for sandbox id, taken from the pool when one
// is ready and built otherwise. It is ErrConflict if id already has one.
func (m *Manager) Acquire(ctx context.Context, id string) (*Sandbox, error) {
	if !idRE.MatchString(id) || strings.HasPrefix(id, "pool-") {
		return nil, fmt.Errorf("sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	sb := &Sandbox{ID: id, Name: m.NameOf(id), cfg: m.cfg}
	if _, err := os.Lstat(sb.Path()); err == nil {
		return nil, fmt.Errorf("netns for %s: %w", id, errdefs.ErrConflict)
	}
	defer m.kick()
	for {
		select {
		case name := <-m.pool:
			err := renameNamed(name, sb.Name)
			if errors.Is(err, errdefs.ErrConflict) {
				// id was taken meanwhile. Not given back: only the
				// filler sends to the pool, and it refills it.
				_ = deleteNamed(name)
				return nil, err
			}
			if err != nil {
				m.log.WarnContext(ctx, "network: pooled namespace unusable", "netns", name, "err", err)
				_ = deleteNamed(name)
				continue
			}
			return sb, nil
		default:
		}
		if err := m.build(sb.Name); err != nil {
			return nil, err
		}
		return sb, nil
	}
}

// Rename gives sb's namespace to sandbox id and returns it under its new
// name; sb must not be used afterwards. Only the bind mount that names the
// namespace moves: its links, addresses and rules stay, and so does a tap
// fd a VMM holds (a tap belongs to the namespace, not to its name), so a
// VM started on a namespace acquired under a placeholder id (a pooled VM)
// becomes the sandbox's. It is ErrConflict if id already has a namespace;
// sb then keeps its name.
func (m *Manager) Rename(ctx context.Context, sb *Sandbox, id string) (*Sandbox, error) {
	if !idRE.MatchString(id) || strings.HasPrefix(id, "pool-") {
		return nil, fmt.Errorf("sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	to := &Sandbox{ID: id, Name: m.NameOf(id), cfg: m.cfg}
	if err := renameNamed(sb.Name, to.Name); err != nil {
		return nil, err
	}
	return to, nil
}

// Adopt returns the existing namespace of sandbox id, e.g. after a worker
// restart; ErrNotFound when there is none. A namespace an earlier version
// left in the old location is moved into the current one first.
func (m *Manager) Adopt(ctx context.Context, id string) (*Sandbox, error) {
	sb := &Sandbox{ID: id, Name: m.NameOf(id), cfg: m.cfg}
	if isNamespace(sb.Path()) {
		return sb, nil
	}
	err := adoptLegacy(sb.Name)
	if err == nil {
		m.log.InfoContext(ctx, "network: moved namespace from the old location", "netns", sb.Name)
		return sb, nil
	}
	if !errors.Is(err, errdefs.ErrNotFound) {
		m.log.WarnContext(ctx, "network: namespace in the old location", "netns", sb.Name, "err", err)
	}
	return nil, fmt.Errorf("netns for %s: %w", id, errdefs.ErrNotFound)
}

// Release removes the sandbox's namespace. Close every listener and tap fd
// opened in it first, or the kernel keeps the (now nameless) namespace alive
// until they close. Safe to call twice.
func (m *Manager) Release(ctx context.Context, sb *Sandbox) error {
	return deleteNamed(sb.Name)
}

// Close stops refilling and removes the pooled namespaces. Sandboxes handed
// out stay; Release them.
func (m *Manager) Close(ctx context.Context) error {
	m.closeOnce.Do(func() { close(m.done) })
	<-m.stopped
	var errs []error
	for {
		select {
		case name := <-m.pool:
			errs = append(errs, deleteNamed(name))
		default:
			return errors.Join(errs...)
		}
	}
}

// ReapOrphans removes this instance's namespaces (pool entries of earlier
// processes included) for which keep, given the namespace name, returns
// false; this manager's own pool is always kept, and other instances'
// namespaces are never touched. What earlier versions left in the old
// location goes too (hidden ones included), unless kept and not yet moved
// by Adopt. A worker calls it once at start, after adopting its sandboxes,
// keeping their namespaces. It returns the names removed.
func (m *Manager) ReapOrphans(ctx context.Context, keep func(name string) bool) ([]string, error) {
	names, err := ListNamespaces(m.prefix())
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, n := range names {
		if keep(n) || m.owns(n) {
			continue
		}
		if err := deleteNamed(n); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, n)
	}
	old, err := reapLegacy(m.prefix(), func(n string) bool {
		return !keep(n) || isNamespace(NamespacePath(n))
	})
	return append(removed, old...), errors.Join(append(errs, err)...)
}

// owns reports whether name is a pool namespace of this manager.
func (m *Manager) owns(name string) bool {
	return strings.HasPrefix(name, fmt.Sprintf("%s%d-", m.poolPrefix(), os.Getpid()))
}
