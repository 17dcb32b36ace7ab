package network

import (
	"context"
	"net"
	"sort"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestMoveTap: the tap a VMM holds in one namespace becomes the tap of
// another, configured as that namespace's own was (name, gateway MAC and
// address, up), which it replaces; frames the VMM writes arrive there. A
// move from a namespace without a tap fails and leaves the target's tap.
func TestMoveTap(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	m := testManager(t, -1)
	slot := acquire(t, m, "tnet-mv-slot")
	sb := acquire(t, m, "tnet-mv-sbx")
	vmm, err := slot.OpenTap(TapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer vmm.Close()
	nl := netlinkAt(t, sb.Path())
	before, err := nl.LinkByName(TapName)
	if err != nil {
		t.Fatal(err)
	}
	links := func() string {
		ls, err := nl.LinkList()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range ls {
			names = append(names, l.Attrs().Name)
		}
		sort.Strings(names)
		return strings.Join(names, ",")
	}
	check := func(when string, wantIndex int, same bool) {
		t.Helper()
		tap, err := nl.LinkByName(TapName)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if (tap.Attrs().Index == wantIndex) != same {
			t.Fatalf("%s: tap index %d (the old one was %d)", when, tap.Attrs().Index, wantIndex)
		}
		if tap.Attrs().HardwareAddr.String() != GatewayMAC.String() || tap.Attrs().Flags&net.FlagUp == 0 {
			t.Fatalf("%s: tap %s flags %v", when, tap.Attrs().HardwareAddr, tap.Attrs().Flags)
		}
		addrs, err := nl.AddrList(tap, 2) // AF_INET
		if err != nil || len(addrs) != 1 || addrs[0].IP.String() != GatewayAddr.String() {
			t.Fatalf("%s: tap addresses %v (%v)", when, addrs, err)
		}
		if got := links(); got != "lo,tap0" {
			t.Fatalf("%s: links %s, want lo,tap0", when, got)
		}
	}

	if err := m.MoveTap(ctx, slot, sb); err != nil {
		t.Fatal(err)
	}
	check("after the move", before.Attrs().Index, false)
	tap, _ := nl.LinkByName(TapName)
	rx := tap.Attrs().Statistics.RxPackets
	frame := append(append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, GuestMAC...), 0x08, 0x06)
	frame = append(frame, make([]byte, 46)...)
	if _, err := vmm.Write(frame); err != nil {
		t.Fatalf("write to the moved tap: %v", err)
	}
	tap, _ = nl.LinkByName(TapName)
	if got := tap.Attrs().Statistics.RxPackets; got != rx+1 {
		t.Fatalf("moved tap received %d frames, want 1", got-rx)
	}

	// slot has no tap now: a second move fails and sb keeps its tap.
	if err := m.MoveTap(ctx, slot, sb); err == nil {
		t.Fatal("move from a namespace without a tap succeeded")
	}
	check("after a failed move", tap.Attrs().Index, true)
}

// TestOpenTapUndoesInterruptedMove: a MoveTap cut short by a crash at
// either of its steps (the namespace's tap set aside as tapout0, the moved
// one already tap0 or still tapin0) is undone by the next OpenTap of the
// namespace, as a wake on a VMM of its own does: the namespace's own tap is
// tap0 again, configured, and the moved one is gone.
func TestOpenTapUndoesInterruptedMove(t *testing.T) {
	requireNetAdmin(t)
	m := testManager(t, -1)
	for _, movedAs := range []string{TapName, tapIncoming} {
		t.Run("moved tap left as "+movedAs, func(t *testing.T) {
			sb := acquire(t, m, "tnet-undo-"+movedAs[:4])
			nl := netlinkAt(t, sb.Path())
			own, err := nl.LinkByName(TapName)
			if err != nil {
				t.Fatal(err)
			}
			// The state a crash leaves: the own tap down and set aside, a
			// second tap (standing in for the moved one) under movedAs.
			if err := nl.LinkSetDown(own); err != nil {
				t.Fatal(err)
			}
			if err := nl.LinkSetName(own, tapOutgoing); err != nil {
				t.Fatal(err)
			}
			moved := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: movedAs}, Mode: netlink.TUNTAP_MODE_TAP, Flags: netlink.TUNTAP_NO_PI}
			if err := nl.LinkAdd(moved); err != nil {
				t.Fatal(err)
			}
			f, err := sb.OpenTap(TapOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			tap, err := nl.LinkByName(TapName)
			if err != nil {
				t.Fatal(err)
			}
			if tap.Attrs().Index != own.Attrs().Index {
				t.Fatalf("tap0 is link %d, want the namespace's own %d", tap.Attrs().Index, own.Attrs().Index)
			}
			if tap.Attrs().Flags&net.FlagUp == 0 || tap.Attrs().HardwareAddr.String() != GatewayMAC.String() {
				t.Fatalf("reinstated tap: flags %v, MAC %s", tap.Attrs().Flags, tap.Attrs().HardwareAddr)
			}
			if addrs, err := nl.AddrList(tap, 2); err != nil || len(addrs) != 1 || addrs[0].IP.String() != GatewayAddr.String() {
				t.Fatalf("reinstated tap addresses %v (%v)", addrs, err)
			}
			for _, n := range []string{tapIncoming, tapOutgoing} {
				if _, err := nl.LinkByName(n); err == nil {
					t.Errorf("%s is still there", n)
				}
			}
		})
	}
}
