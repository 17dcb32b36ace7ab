package network

import (
	"context"
	"net"
	"sort"
	"strings"
	"testing"
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
