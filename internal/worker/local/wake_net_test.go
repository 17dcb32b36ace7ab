package local_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local"
)

// TestWakeSlotsNetwork: with networking on, a wake slot waits with its tap
// in a namespace of its own; the wake that takes it moves the tap into the
// sandbox's namespace, whose policy then holds (the allowed upstream is
// reached, the others are not) and whose links are lo and tap0 only; the
// slot's namespace is gone. A take that fails (the slot's tap deleted
// under it) leaves no namespace of the slot and the sandbox's own tap,
// and the wake goes on with a VMM of its own. Delete and Close leave no
// namespace, VMM or file.
func TestWakeSlotsNetwork(t *testing.T) {
	e := newEnv(t)
	slotRoot := filepath.Join(e.cfg.Storage.Root(), "wakepool")
	t.Cleanup(func() { testenv.CheckNoLeaks(t, slotRoot) })
	ctx := context.Background()
	mgr, namespaces := e.withNetwork("twake")
	e.cfg.PoolSize = -1
	w := e.open()
	t.Cleanup(func() { cleanupAll(t, w) })

	s := spec("sbx_wn")
	s.Network = json.RawMessage(`{"egress":{"default":"deny","allow":["` + poolAllowedHost + `"]}}`)
	if _, err := w.CreateSandbox(ctx, s); err != nil {
		t.Fatal(err)
	}
	c := agent(t, w, "sbx_wn")
	checkEgress := func(when string) {
		t.Helper()
		if code := sh(t, c, "rm -f /tmp/allowed; timeout 30 wget -q -O /tmp/allowed http://"+poolAllowedHost+"/"); code != 0 {
			t.Fatalf("%s: allowed upstream not reached: exit %d", when, code)
		}
		if b, err := readFile(t, c, "/tmp/allowed"); err != nil || !strings.Contains(string(b), "server=allowed") {
			t.Fatalf("%s: allowed upstream answered %q (%v)", when, b, err)
		}
		for _, url := range []string{"http://" + poolOtherHost + "/", "http://" + poolUpOther.String() + "/"} {
			code := sh(t, c, "rm -f /tmp/denied; timeout 30 wget -q -O /tmp/denied "+url+"; rc=$?; grep -q server= /tmp/denied && exit 99; exit $rc")
			if code == 0 || code == 99 {
				t.Errorf("%s: %s reached (exit %d)", when, url, code)
			}
		}
	}
	sbLinks := func() []string {
		var names []string
		err := network.InNamespace(network.NamespacePath(mgr.NameOf("sbx_wn")), func() error {
			links, err := netlink.LinkList()
			for _, l := range links {
				names = append(names, l.Attrs().Name)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(names)
		return names
	}

	if _, err := w.SuspendSandbox(ctx, "sbx_wn"); err != nil {
		t.Fatal(err)
	}
	awaitWakes(t, w, "a slot", func(s local.PoolStats) bool { return s.Ready == 1 })
	first := namespaces("wvm-")
	if len(first) != 1 {
		t.Fatalf("wake slot namespaces: %v, want one", first)
	}
	st, err := w.WakeSandbox(ctx, "sbx_wn")
	if err != nil {
		t.Fatal(err)
	}
	if ws := w.WakePoolStats(); ws.Taken != 1 || st.State != worker.VMRunning {
		t.Fatalf("the networked wake did not take the slot: %+v, state %s", ws, st.State)
	}
	// (A slow wake may see the refill begin: only the taken slot's
	// namespace must be gone.)
	if _, err := os.Stat(network.NamespacePath(first[0])); !os.IsNotExist(err) {
		t.Fatalf("the taken slot's namespace remains: %v", err)
	}
	if got := sbLinks(); strings.Join(got, ",") != "lo,tap0" {
		t.Fatalf("links of the woken sandbox's namespace: %v, want lo and tap0", got)
	}
	checkEgress("after a wake on a slot")

	// A failed take: the refilled slot's tap is deleted before the wake.
	awaitWakes(t, w, "a refill", func(s local.PoolStats) bool { return s.Ready == 1 && s.Made == 2 })
	if _, err := w.SuspendSandbox(ctx, "sbx_wn"); err != nil {
		t.Fatal(err)
	}
	awaitWakes(t, w, "a slot", func(s local.PoolStats) bool { return s.Ready == 1 })
	slotNS := namespaces("wvm-")
	if len(slotNS) != 1 {
		t.Fatalf("wake slot namespaces: %v, want one", slotNS)
	}
	if err := network.InNamespace(network.NamespacePath(slotNS[0]), func() error {
		l, err := netlink.LinkByName(network.TapName)
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WakeSandbox(ctx, "sbx_wn"); err != nil {
		t.Fatalf("wake after a failed take: %v", err)
	}
	if ws := w.WakePoolStats(); ws.Taken != 2 {
		t.Fatalf("the wake did not try the slot: %+v", ws)
	}
	// (The suspend asked for a new slot meanwhile: only the failed one's
	// namespace must be gone.)
	if _, err := os.Stat(network.NamespacePath(slotNS[0])); !os.IsNotExist(err) {
		t.Fatalf("the failed slot's namespace remains: %v", err)
	}
	if got := sbLinks(); strings.Join(got, ",") != "lo,tap0" {
		t.Fatalf("links after a failed take: %v, want lo and tap0", got)
	}
	checkEgress("after a failed take")

	if err := w.DeleteSandbox(ctx, "sbx_wn"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(network.NamespacePath(mgr.NameOf("sbx_wn"))); !os.IsNotExist(err) {
		t.Fatalf("deleted sandbox's namespace remains: %v", err)
	}
	w.Close()
	if got := namespaces("wvm-"); len(got) != 0 {
		t.Fatalf("wake slot namespaces left after Close: %v", got)
	}
}
