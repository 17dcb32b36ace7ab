package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/vmmtest"
)

// TestProbeELFReachesInit boots the probe initramfs under TCG: the
// hand-assembled /init must print the marker (else "auto" would never pick
// KVM even where it works).
func TestProbeELFReachesInit(t *testing.T) {
	d, err := New(vmm.Options{Accel: AccelTCG})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Check(context.Background()); err != nil {
		t.Skip(err)
	}
	k := vmmtest.FindKernel(t)
	if err := probeKVM(context.Background(), d.binary, k.Vmlinuz, AccelTCG,
		fmt.Sprintf("tsc_early_khz=%d", hostTSCkHz(d.log)), 3*time.Minute); err != nil {
		t.Fatalf("probe under tcg: %v", err)
	}
}

func TestAutoAccelIsCached(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm: auto resolves to tcg without probing")
	}
	cache := t.TempDir()
	d, err := New(vmm.Options{Accel: AccelAuto, CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Check(context.Background()); err != nil {
		t.Skip(err)
	}
	k := vmmtest.FindKernel(t)
	a, err := d.Accel(context.Background(), k.Vmlinuz)
	if err != nil || (a != AccelKVM && a != AccelTCG) {
		t.Fatalf("Accel = %q, %v", a, err)
	}
	b, err := os.ReadFile(filepath.Join(cache, "qemu-accel.json"))
	if err != nil || !strings.Contains(string(b), `"`+a+`"`) {
		t.Fatalf("cache file = %s, %v", b, err)
	}
	// A new driver answers from the cache file.
	d2, _ := New(vmm.Options{Accel: AccelAuto, CacheDir: cache})
	if got := d2.loadAccelCache()[d2.probeKey(k.Vmlinuz)]; got != a {
		t.Errorf("cached accel for a new driver = %q, want %q", got, a)
	}
}

func TestArgs(t *testing.T) {
	d := &Driver{tscKHz: 2000000}
	d.tscOnce.Do(func() {})
	spec := vmm.BootSpec{
		ID: "vm1", StateDir: "/s", Kernel: "/k", Initrd: "/i", Cmdline: "quiet",
		Disks: []vmm.Disk{{Path: "/d,1.img"}, {Path: "/ro.img", ReadOnly: true}},
		VCPUs: 2, MemoryMiB: 256, MemoryFile: "/m/mem",
	}
	tests := []struct {
		name     string
		accel    string
		incoming bool
		want     []string
		wantNot  []string
	}{
		{"tcg", AccelTCG, false,
			[]string{"tcg,thread=multi,tb-size=128", "console=ttyS0 panic=-1 tsc_early_khz=2000000 quiet",
				"id=disk0,file=/dev/fdset/2,format=raw,if=none,cache=none,aio=threads,auto-read-only=off",
				"id=disk1,file=/dev/fdset/3,format=raw,if=none,cache=none,aio=threads,readonly=on",
				"fd=5,set=1", "fd=6,set=2", "fd=7,set=3", "file,id=con,append=on,path=/dev/fdset/1",
				"socket,id=qmp,server=on,wait=off,fd=3", "socket,id=agent,server=on,wait=off,fd=4",
				"-kernel", "/kernel", "-initrd", "/initrd",
				"memory-backend-file,id=mem,size=256M,mem-path=/memory,share=on",
				"on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
				machineOpts + ",memory-backend=mem", "virtserialport,chardev=agent,name=space.agent"},
			[]string{"-incoming", "-S", "/k", "/i", "/m/mem", "/s"}},
		{"kvm incoming", AccelKVM, true,
			[]string{"kvm", "host", "-incoming", "defer", "-S", "console=ttyS0 panic=-1 quiet"},
			[]string{"tcg,thread=multi,tb-size=128"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &handout{tap: -1, qmp: 3, agent: 4, console: 5, disks: []int{6, 7}}
			args := d.args(spec, tc.accel, tc.incoming, h)
			for _, w := range tc.want {
				if !slices.Contains(args, w) {
					t.Errorf("args lack %q: %q", w, args)
				}
			}
			for _, w := range tc.wantNot {
				if slices.Contains(args, w) {
					t.Errorf("args have %q: %q", w, args)
				}
			}
		})
	}
}

// TestConsoleReadsRotatedLog: the console's tail spans the old part of
// the log (what the log copier rotated out) and the live one, and stays
// once the files are gone.
func TestConsoleReadsRotatedLog(t *testing.T) {
	dir := t.TempDir()
	c := newConsole(dir)
	var b strings.Builder
	for i := 0; b.Len() < consoleKeep; i++ {
		b.WriteString("line " + strings.Repeat("x", 50) + " " + time.Duration(i).String() + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, fileConsoleOld), []byte(b.String()+"BEFORE "), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fileConsole), []byte("ROTATION\nLAST LINE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := c.tail(2); len(got) != 2 || got[0] != "BEFORE ROTATION" || got[1] != "LAST LINE" {
		t.Errorf("tail across the rotation = %q", got)
	}
	if n := len(c.bytes()); n > consoleKeep {
		t.Errorf("console read %d bytes, want at most %d", n, consoleKeep)
	}
	c.freeze()
	removeOwned(dir)
	if got := c.tail(1); len(got) != 1 || got[0] != "LAST LINE" {
		t.Errorf("tail after freeze = %q", got)
	}
}

// TestLegacyConsoleRotated: a VMM adopted from a worker that ran before
// the log copier appends to its console file itself; the adopting worker
// still rotates it.
func TestLegacyConsoleRotated(t *testing.T) {
	dir := t.TempDir()
	c := newConsole(dir)
	big := strings.Repeat(strings.Repeat("x", 63)+"\n", 3*consoleKeep/64) + "LAST LINE\n"
	if err := os.WriteFile(filepath.Join(dir, fileConsole), []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	go c.rotateLegacy(done)
	// testenv.Eventually would be an import cycle (testenv uses this driver).
	rotated := func() error {
		live, err1 := os.Stat(filepath.Join(dir, fileConsole))
		old, err2 := os.Stat(filepath.Join(dir, fileConsoleOld))
		if err1 != nil || err2 != nil || live.Size() != 0 || old.Size() > consoleKeep {
			return fmt.Errorf("not rotated: %v %v", err1, err2)
		}
		return nil
	}
	for deadline := time.Now().Add(30 * time.Second); rotated() != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(rotated())
		}
	}
	if got := c.tail(1); len(got) != 1 || got[0] != "LAST LINE" {
		t.Errorf("tail after rotation = %q", got)
	}
}
