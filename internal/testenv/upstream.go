package testenv

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// UpstreamNet makes a network namespace named name that stands in for hosts
// outside the machine: a veth pair links it to the host, the host's end gets
// hostAddr/24, the namespace's end every address in addrs (/24 each).
// ifPrefix (at most 4 characters) names the veth ends. Cleanup removes both.
// It returns the namespace's path; listen in it with network.InNamespace.
func UpstreamNet(t testing.TB, name, ifPrefix string, hostAddr netip.Addr, addrs ...netip.Addr) string {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	must(err)
	h, err := netns.NewNamed(name) // moves this thread into it: move back
	if err == nil {
		err = netns.Set(orig)
	}
	orig.Close()
	runtime.UnlockOSThread()
	must(err)
	t.Cleanup(func() { netns.DeleteNamed(name) })
	defer h.Close()

	hostIf := fmt.Sprintf("%.4su%d", ifPrefix, os.Getpid()%100000)
	peerIf := fmt.Sprintf("%.4sp%d", ifPrefix, os.Getpid()%100000)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf}, PeerName: peerIf}
	must(netlink.LinkAdd(veth))
	t.Cleanup(func() { netlink.LinkDel(veth) })
	peer, err := netlink.LinkByName(peerIf)
	must(err)
	must(netlink.LinkSetNsFd(peer, int(h)))
	host, err := netlink.LinkByName(hostIf)
	must(err)
	must(netlink.AddrAdd(host, &netlink.Addr{IPNet: prefix24(hostAddr)}))
	must(netlink.LinkSetUp(host))
	nl, err := netlink.NewHandleAt(h)
	must(err)
	defer nl.Close()
	up, err := nl.LinkByName(peerIf)
	must(err)
	for _, a := range addrs {
		must(nl.AddrAdd(up, &netlink.Addr{IPNet: prefix24(a)}))
	}
	must(nl.LinkSetUp(up))
	return filepath.Join("/run/netns", name) // where netns.NewNamed mounts it
}

func prefix24(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(24, 32)}
}
