package vmmtest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/agentproto"

	"github.com/space-sandbox/space/internal/guest"
	"github.com/space-sandbox/space/internal/vmm"
)

// Guest is what a test VM boots. The guest writes Greeting (a full line
// starting with it) to the agent link again and again.
type Guest struct {
	Kernel  string
	Initrd  string
	Cmdline string
	// Disks are attached in order; the harness owns the files (outside any
	// StateDir).
	Disks     []vmm.Disk
	MemoryMiB int
	// Greeting is the prefix of every line the guest writes to the agent link.
	Greeting string
	// DiskSectors is the size of /dev/vda the guest reports in its greeting
	// ("vda=<sectors>"), or 0 when it has no disk.
	DiskSectors int64
}

// BusyboxGreeting starts the lines BusyboxGuest writes to the agent link.
const BusyboxGreeting = "space-vmmtest ready"

// busyboxModules are loaded by the test guest's /init (dependencies added).
var busyboxModules = []string{"virtio_ring", "virtio", "virtio_mmio", "virtio_blk", "virtio_console"}

// FindKernel locates the guest kernel for tests: $SPACE_KERNEL_DIR, else
// /var/lib/space/kernel (the cache scripts/setup.sh fills), else an extracted
// Debian package at /tmp/k/x. It skips the test naming what is missing.
func FindKernel(t testing.TB) guest.Kernel {
	t.Helper()
	var dirs []string
	if d := os.Getenv(guest.KernelDirEnv); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, guest.DefaultKernelDir, "/tmp/k/x")
	for _, d := range dirs {
		if k, err := guest.Locate(d); err == nil {
			return k
		}
		if k, ok := extractedPackage(d); ok {
			return k
		}
	}
	t.Skipf("no guest kernel: looked in %s (run scripts/setup.sh or set %s)", strings.Join(dirs, ", "), guest.KernelDirEnv)
	return guest.Kernel{}
}

// extractedPackage recognises a `dpkg -x` of linux-image-*: boot/vmlinuz-<v>
// next to lib/modules/<v>.
func extractedPackage(dir string) (guest.Kernel, bool) {
	matches, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*"))
	for _, m := range matches {
		v := strings.TrimPrefix(filepath.Base(m), "vmlinuz-")
		mods := filepath.Join(dir, "lib", "modules", v)
		if fi, err := os.Stat(filepath.Join(mods, "kernel")); err == nil && fi.IsDir() {
			return guest.Kernel{Version: v, Vmlinuz: m, ModulesDir: mods}, true
		}
	}
	return guest.Kernel{}, false
}

// BusyboxGuest builds a test guest in t's temp dir: a busybox-static
// initramfs whose /init loads the virtio modules, reports /dev/vda's size and
// then keeps writing BusyboxGreeting lines to the agentproto.PortName port.
// It attaches one 16 MiB raw disk. It skips when busybox or a kernel is missing.
func BusyboxGuest(t testing.TB) Guest {
	t.Helper()
	const busybox = "/bin/busybox"
	bb, err := os.ReadFile(busybox)
	if err != nil {
		t.Skipf("test guest needs %s (Debian package busybox-static): %v", busybox, err)
	}
	k := FindKernel(t)
	mods, err := guest.ResolveModules(k, busyboxModules)
	if err != nil {
		t.Skipf("test guest: %v", err)
	}
	dir := t.TempDir()
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := writeBusyboxInitrd(initrd, bb, k, mods); err != nil {
		t.Fatalf("build test initramfs: %v", err)
	}
	const diskBytes = 16 << 20
	disk := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, diskBytes); err != nil {
		t.Fatal(err)
	}
	return Guest{
		Kernel:      k.Vmlinuz,
		Initrd:      initrd,
		Disks:       []vmm.Disk{{Path: disk}},
		MemoryMiB:   192,
		Greeting:    BusyboxGreeting,
		DiskSectors: diskBytes / 512,
	}
}

func busyboxInit(mods []guest.Module) string {
	var b strings.Builder
	b.WriteString("#!/bin/busybox sh\n/bin/busybox --install -s /bin\nexport PATH=/bin\n")
	b.WriteString("mount -t proc proc /proc\nmount -t sysfs sys /sys\nmount -t devtmpfs dev /dev\n")
	for _, m := range mods {
		fmt.Fprintf(&b, "insmod /lib/mod/%s.ko || echo 'vmmtest: insmod %s failed'\n", m.Name, m.Name)
	}
	// Ports appear asynchronously after virtio_console loads: poll a while.
	fmt.Fprintf(&b, `port=
i=0
while [ -z "$port" ] && [ $i -lt 300 ]; do
  for d in /sys/class/virtio-ports/*; do
    [ "$(cat $d/name 2>/dev/null)" = %q ] && port=/dev/${d##*/}
  done
  [ -n "$port" ] && [ -e "$port" ] || { port=; i=$((i+1)); sleep 0.1; }
done
vda=$(cat /sys/block/vda/size 2>/dev/null || echo none)
echo "vmmtest: port=$port vda=$vda"
[ -n "$port" ] || { echo "vmmtest: no agent port"; poweroff -f; }
n=0
while true; do
  n=$((n+1))
  echo "%s vda=$vda seq=$n" > $port
  sleep 1
done
`, agentproto.PortName, BusyboxGreeting)
	return b.String()
}

func writeBusyboxInitrd(path string, bb []byte, k guest.Kernel, mods []guest.Module) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := guest.NewCPIOWriter(f)
	file := func(name string, perm uint32, data []byte) {
		w.File(name, perm, bytes.NewReader(data), int64(len(data)))
	}
	for _, d := range []string{"bin", "proc", "sys", "dev", "lib", "lib/mod"} {
		w.Dir(d, 0o755)
	}
	file("bin/busybox", 0o755, bb)
	file("init", 0o755, []byte(busyboxInit(mods)))
	for _, m := range mods {
		data, err := os.ReadFile(filepath.Join(k.ModulesDir, m.Path))
		if err != nil {
			return err
		}
		file("lib/mod/"+m.Name+".ko", 0o644, data)
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}
