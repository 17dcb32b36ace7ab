package network

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Names a tap has for the moment MoveTap swaps two: the incoming one, and
// the one it replaces until it is deleted.
const (
	tapIncoming = "tapin0"
	tapOutgoing = "tapout0"
)

// MoveTap makes the tap of namespace from the tap of namespace to,
// replacing to's own, with everything a namespace's tap has (its name, the
// gateway's MAC and address, up): a VMM started ahead on from's tap (a
// wake slot) becomes the VM of to's sandbox without reopening it, under
// to's rules (they match the tap by name) and listeners, and with the
// connections to's namespace already holds. from is left without a tap:
// Release it. No guest must run on the tap meanwhile.
//
// On error to has its own tap again, configured as before, and the moved
// one (if it got there) is deleted; from may have lost its tap.
func (m *Manager) MoveTap(ctx context.Context, from, to *Sandbox) (err error) {
	hFrom, err := netns.GetFromPath(from.Path())
	if err != nil {
		return fmt.Errorf("open netns: %w", errors.Join(errdefs.ErrInternal, err))
	}
	defer hFrom.Close()
	hTo, err := netns.GetFromPath(to.Path())
	if err != nil {
		return fmt.Errorf("open netns: %w", errors.Join(errdefs.ErrInternal, err))
	}
	defer hTo.Close()
	src, err := netlink.NewHandleAt(hFrom)
	if err != nil {
		return fmt.Errorf("netlink in netns: %w", errors.Join(errdefs.ErrInternal, err))
	}
	defer src.Close()
	dst, err := netlink.NewHandleAt(hTo)
	if err != nil {
		return fmt.Errorf("netlink in netns: %w", errors.Join(errdefs.ErrInternal, err))
	}
	defer dst.Close()

	if err := undoInterruptedMove(dst); err != nil {
		return err
	}
	tap, err := src.LinkByName(TapName)
	if err == nil {
		err = src.LinkSetDown(tap) // a link is renamed only when down
	}
	if err == nil {
		err = src.LinkSetName(tap, tapIncoming)
	}
	if err == nil {
		err = src.LinkSetNsFd(tap, int(hTo))
	}
	if err != nil {
		return fmt.Errorf("move tap: %w", errors.Join(errdefs.ErrInternal, err))
	}
	moved, err := dst.LinkByName(tapIncoming)
	if err != nil {
		return fmt.Errorf("find moved tap: %w", errors.Join(errdefs.ErrInternal, err))
	}
	old, oldErr := dst.LinkByName(TapName)
	renamed := false
	defer func() {
		if err == nil {
			return
		}
		_ = dst.LinkDel(moved)
		if renamed {
			err = errors.Join(err, reinstate(dst, old))
		}
	}()
	if oldErr == nil {
		if err := dst.LinkSetDown(old); err != nil {
			return fmt.Errorf("replace tap: %w", errors.Join(errdefs.ErrInternal, err))
		}
		renamed = true // down counts: reinstate brings it up again
		if err := dst.LinkSetName(old, tapOutgoing); err != nil {
			return fmt.Errorf("replace tap: %w", errors.Join(errdefs.ErrInternal, err))
		}
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: GatewayAddr.AsSlice(), Mask: net.CIDRMask(GuestPrefix.Bits(), 32)}}
	for _, step := range []func() error{
		func() error { return dst.LinkSetName(moved, TapName) },
		func() error { return dst.LinkSetHardwareAddr(moved, GatewayMAC) },
		func() error { return dst.AddrReplace(moved, addr) },
		func() error {
			return InNamespace(to.Path(), func() error { return writeSysctl("net.ipv6.conf."+TapName+".disable_ipv6", "1") })
		},
		func() error { return dst.LinkSetUp(moved) },
	} {
		if err := step(); err != nil {
			return fmt.Errorf("configure moved tap: %w", errors.Join(errdefs.ErrInternal, err))
		}
	}
	if oldErr == nil {
		if err := dst.LinkDel(old); err != nil {
			m.log.WarnContext(ctx, "network: replaced tap not deleted", "netns", to.Name, "err", err)
		}
	}
	return nil
}

// undoInterruptedMove puts a namespace's tap back as it was before a
// MoveTap that a crash cut short: the tap set aside (tapOutgoing) is the
// namespace's own again, and a tap beside it under its name or the
// incoming one is the moved one, whose VMM did not outlive the interrupted
// wake (the snapshot is still the sandbox: worker/local's adopt stops it),
// so it goes. Without a tap set aside there is nothing to undo but an
// incoming one left over. nl works in the namespace.
func undoInterruptedMove(nl *netlink.Handle) error {
	if l, err := nl.LinkByName(tapIncoming); err == nil {
		if err := nl.LinkDel(l); err != nil {
			return fmt.Errorf("remove interrupted move's tap: %w", errors.Join(errdefs.ErrInternal, err))
		}
	}
	old, err := nl.LinkByName(tapOutgoing)
	if err != nil {
		return nil
	}
	if moved, err := nl.LinkByName(TapName); err == nil {
		if err := nl.LinkDel(moved); err != nil {
			return fmt.Errorf("remove interrupted move's tap: %w", errors.Join(errdefs.ErrInternal, err))
		}
	}
	return reinstate(nl, old)
}

// reinstate gives the tap old its name back and brings it up (its
// address stayed while it was down).
func reinstate(nl *netlink.Handle, old netlink.Link) error {
	if err := nl.LinkSetName(old, TapName); err != nil {
		return fmt.Errorf("reinstate tap: %w", errors.Join(errdefs.ErrInternal, err))
	}
	if err := nl.LinkSetUp(old); err != nil {
		return fmt.Errorf("reinstate tap: %w", errors.Join(errdefs.ErrInternal, err))
	}
	return nil
}
