package network

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/testenv"
)

func requireNetAdmin(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces, taps, nftables")
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("needs /dev/net/tun")
	}
}

// testInstance names this test process's namespaces, so it never touches
// those of a server or another test process on the host.
var testInstance = fmt.Sprintf("tnet%d", os.Getpid())

// testManager is a Manager of this test process's instance, closed at
// cleanup.
func testManager(t *testing.T, poolSize int) *Manager {
	t.Helper()
	m := New(context.Background(), Config{Instance: testInstance, PoolSize: poolSize})
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// acquire takes id's namespace from m and releases it at cleanup.
func acquire(t *testing.T, m *Manager, id string) *Sandbox {
	t.Helper()
	sb, err := m.Acquire(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Release(context.Background(), sb) })
	return sb
}

// netlinkAt is a netlink handle in the namespace at path, closed (with the
// namespace's handle) at cleanup.
func netlinkAt(t *testing.T, path string) *netlink.Handle {
	t.Helper()
	h, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nl.Close)
	return nl
}

func TestMain(m *testing.M) {
	code := m.Run()
	mine, _ := ListNamespaces(NamePrefix + testInstance)
	for _, n := range mine {
		println("leaked netns:", n)
		code = 1
	}
	os.Exit(code)
}

func TestAcquireConfiguresNamespace(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	m := testManager(t, 1)
	id := "tnet-" + strings.ReplaceAll(t.Name(), "/", "-")
	sb := acquire(t, m, id)
	if _, err := m.Acquire(ctx, id); err == nil {
		t.Fatal("second Acquire of the same id succeeded")
	}

	h, err := netns.GetFromPath(sb.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	tap, err := nl.LinkByName(TapName)
	if err != nil {
		t.Fatal(err)
	}
	if tap.Attrs().HardwareAddr.String() != GatewayMAC.String() {
		t.Errorf("tap MAC %s, want %s", tap.Attrs().HardwareAddr, GatewayMAC)
	}
	addrs, _ := nl.AddrList(tap, netlink.FAMILY_ALL)
	if len(addrs) != 1 || addrs[0].IP.String() != GatewayAddr.String() {
		t.Errorf("tap addresses %v, want only %s (no IPv6)", addrs, GatewayAddr)
	}
	links, _ := nl.LinkList()
	if len(links) != 2 {
		t.Errorf("links in sandbox netns: %d, want lo and %s only", len(links), TapName)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(h)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil || len(tables) != 2 {
		t.Errorf("nft tables %v (%v), want ip and ip6 space", tables, err)
	}
	var v6 string
	err = InNamespace(sb.Path(), func() error {
		b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + TapName + "/disable_ipv6")
		v6 = strings.TrimSpace(string(b))
		return err
	})
	if err != nil || v6 != "1" {
		t.Errorf("disable_ipv6 on tap = %q (%v), want 1", v6, err)
	}

	f, err := sb.OpenTap(TapOptions{VnetHdr: true})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	l, err := sb.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()

	if err := m.Release(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx, sb); err != nil {
		t.Fatalf("second Release: %v", err)
	}
}

func TestReapOrphans(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	m := testManager(t, -1)
	live := acquire(t, m, "tnet-reap-live")
	dead := acquire(t, m, "tnet-reap-dead")
	// Another instance's namespace (another server on the host) is never
	// this manager's to reap.
	other := New(ctx, Config{Instance: testInstance + "x", PoolSize: -1})
	t.Cleanup(func() { other.Close(context.Background()) })
	foreign, err := other.Acquire(ctx, "tnet-reap-foreign")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Release(context.Background(), foreign) })
	removed, err := m.ReapOrphans(ctx, func(name string) bool { return name != dead.Name })
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range removed {
		if r == dead.Name {
			found = true
		}
		if r == live.Name || r == foreign.Name {
			t.Errorf("reaped %s", r)
		}
	}
	if !found {
		t.Errorf("removed %v, want %s", removed, dead.Name)
	}
}

// TestAcquireFromPool awaits the pool by looking at the namespaces it made,
// never by taking from (and putting back into) the channel the filler
// sends to: with a capacity of 1, putting back races the refill and blocks.
func TestAcquireFromPool(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	m := testManager(t, 1)
	pooled := awaitPool(t, m)
	sb := acquire(t, m, "tnet-pool-a")
	if _, err := os.Stat(NamespacePath(pooled)); !os.IsNotExist(err) {
		t.Fatalf("pooled name %s still present: %v", pooled, err)
	}
	f, err := sb.OpenTap(TapOptions{})
	if err != nil {
		t.Fatalf("renamed namespace lost its tap: %v", err)
	}
	f.Close()
	// The filler refills the pool, and Close removes what it made.
	if again := awaitPool(t, m); again == pooled {
		t.Fatalf("pool refilled with %s again", again)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left, _ := ListNamespaces(m.poolPrefix()); len(left) != 0 {
		t.Fatalf("pool namespaces left after Close: %v", left)
	}
}

// awaitPool awaits m's pool (of size 1) holding a ready namespace and
// returns its name. It only looks: len of the channel, then the directory,
// where the ready one is the only pool namespace (the filler stops at a
// full pool).
func awaitPool(t testing.TB, m *Manager) string {
	t.Helper()
	var name string
	awaitCond(t, 30*time.Second, "pool filled", func() bool {
		if len(m.pool) != 1 {
			return false
		}
		names, _ := ListNamespaces(m.poolPrefix())
		if len(names) != 1 {
			return false
		}
		name = names[0]
		return true
	})
	return name
}

// awaitCond polls cond until it holds, failing the test after timeout.
func awaitCond(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %s", what, timeout)
		case <-tick.C:
		}
	}
}

// TestRenameKeepsOpenTap renames a namespace whose tap a "VMM" (here, the
// test) holds open: the frames it writes afterwards arrive on the tap of the
// namespace under its new name, the old name is gone, and renaming onto a
// taken name is ErrConflict and leaves the namespace where it was.
func TestRenameKeepsOpenTap(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	m := testManager(t, -1)
	pooled := acquire(t, m, "tnet-ren-pvm")
	acquire(t, m, "tnet-ren-taken")
	vmm, err := pooled.OpenTap(TapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer vmm.Close()

	if _, err := m.Rename(ctx, pooled, "tnet-ren-taken"); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("rename onto a taken name: %v, want ErrConflict", err)
	}
	if _, err := os.Stat(pooled.Path()); err != nil {
		t.Fatalf("failed rename lost the namespace: %v", err)
	}
	sb, err := m.Rename(ctx, pooled, "tnet-ren-sbx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Release(context.Background(), sb) })
	if sb.Name != m.NameOf("tnet-ren-sbx") {
		t.Fatalf("renamed to %s", sb.Name)
	}
	if _, err := os.Stat(pooled.Path()); !os.IsNotExist(err) {
		t.Fatalf("old name still present: %v", err)
	}

	nl := netlinkAt(t, sb.Path())
	rx := func() uint64 {
		l, err := nl.LinkByName(TapName)
		if err != nil {
			t.Fatal(err)
		}
		return l.Attrs().Statistics.RxPackets
	}
	before := rx()
	// A broadcast ARP request, as a guest would send: the tap receives it.
	frame := append(append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, GuestMAC...), 0x08, 0x06)
	frame = append(frame, make([]byte, 46)...)
	if _, err := vmm.Write(frame); err != nil {
		t.Fatalf("write to the tap after rename: %v", err)
	}
	if after := rx(); after != before+1 {
		t.Fatalf("tap of the renamed namespace received %d frames, want 1", after-before)
	}
}
