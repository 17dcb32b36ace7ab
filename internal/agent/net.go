package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// resolvConf is where the guest's resolver reads its servers.
const resolvConf = "/etc/resolv.conf"

// bringUpLoopback brings lo up (the kernel gives it 127.0.0.1 and ::1)
// whether or not the sandbox gets a network: the port calls dial the
// guest's servers there, and a guest without a network has servers too.
func bringUpLoopback(log *slog.Logger) {
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		log.Warn("bring up the loopback", "err", err)
	}
}

// configureNetwork brings up lo and the NIC with gn's MAC, sets its address
// and default route, and writes the DNS servers to /etc/resolv.conf. It is
// idempotent, so a restored guest can be configured again.
func (a *Agent) configureNetwork(gn agentproto.GuestNetwork) error {
	mac, err := net.ParseMAC(gn.MAC)
	if err != nil {
		return fmt.Errorf("network mac %q: %w", gn.MAC, errdefs.ErrInvalidArgument)
	}
	pfx, err := netip.ParsePrefix(gn.Address)
	if err != nil || !pfx.Addr().Is4() {
		return fmt.Errorf("network address %q: %w", gn.Address, errdefs.ErrInvalidArgument)
	}
	gw, err := netip.ParseAddr(gn.Gateway)
	if err != nil || !gw.Is4() || !pfx.Contains(gw) {
		return fmt.Errorf("network gateway %q: %w", gn.Gateway, errdefs.ErrInvalidArgument)
	}
	for _, d := range gn.DNS {
		if _, err := netip.ParseAddr(d); err != nil {
			return fmt.Errorf("network dns %q: %w", d, errdefs.ErrInvalidArgument)
		}
	}
	if lo, err := netlink.LinkByName("lo"); err == nil {
		_ = netlink.LinkSetUp(lo)
	}
	nic, err := findLink(mac, 5*time.Second)
	if err != nil {
		return err
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: pfx.Addr().AsSlice(), Mask: net.CIDRMask(pfx.Bits(), 32)}}
	steps := []struct {
		what string
		do   func() error
	}{
		{"set link up", func() error { return netlink.LinkSetUp(nic) }},
		{"set address", func() error { return netlink.AddrReplace(nic, addr) }},
		{"set default route", func() error {
			return netlink.RouteReplace(&netlink.Route{LinkIndex: nic.Attrs().Index, Gw: gw.AsSlice(),
				Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}})
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("network %s on %s: %w", s.what, nic.Attrs().Name, errors.Join(errdefs.ErrInternal, err))
		}
	}
	if len(gn.DNS) > 0 {
		var b strings.Builder
		b.WriteString("# written by the space agent\n")
		for _, d := range gn.DNS {
			fmt.Fprintf(&b, "nameserver %s\n", d)
		}
		if err := writeFileReplacing(resolvConf, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", resolvConf, errors.Join(errdefs.ErrInternal, err))
		}
	}
	a.log.Debug("network configured", "link", nic.Attrs().Name, "address", gn.Address, "gateway", gn.Gateway)
	return nil
}

// findLink returns the link with hardware address mac, waiting up to wait
// for the driver to register it (a NIC probes late on a slow boot).
func findLink(mac net.HardwareAddr, wait time.Duration) (netlink.Link, error) {
	deadline := time.Now().Add(wait)
	for {
		links, err := netlink.LinkList()
		if err != nil {
			return nil, fmt.Errorf("list links: %w", errors.Join(errdefs.ErrInternal, err))
		}
		for _, l := range links {
			if l.Attrs().HardwareAddr.String() == mac.String() {
				return l, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no network interface with address %s: %w", mac, errdefs.ErrFailedPrecondition)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeFileReplacing writes path anew (a symlink there, e.g. into a
// resolver daemon's runtime dir, is replaced by a plain file).
func writeFileReplacing(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".space-tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
