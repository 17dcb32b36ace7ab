package qemu

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/guest"
	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/vmmtest"
)

// floodInit writes to the serial console as fast as the guest can for
// floodSeconds, then a last line, then idles.
const (
	floodSeconds = 20
	floodInit    = `#!/bin/busybox sh
/bin/busybox mount -t devtmpfs dev /dev
/bin/busybox timeout 20 /bin/busybox yes 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef > /dev/ttyS0
echo LAST LINE > /dev/ttyS0
exec /bin/busybox sleep 100000
`
)

// TestConsoleFloodBounded boots a guest that floods its serial console for
// 20 s (root in the guest may: cat /dev/urandom > /dev/console) and
// detaches the VM at once, as a worker that exits does: nothing of the
// worker reads or rotates the log. Sampled all along, neither part of the
// console log passes its bound; the flood's last line arrives.
func TestConsoleFloodBounded(t *testing.T) {
	if _, err := exec.LookPath(DefaultBinary); err != nil {
		t.Skipf("needs %s", DefaultBinary)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (the jail)")
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skipf("needs /bin/busybox (busybox-static): %v", err)
	}
	k := vmmtest.FindKernel(t)
	initrd := filepath.Join(t.TempDir(), "flood.cpio")
	f, err := os.Create(initrd)
	if err != nil {
		t.Fatal(err)
	}
	w := guest.NewCPIOWriter(f)
	for _, d := range []string{"bin", "dev"} {
		w.Dir(d, 0o755)
	}
	w.File("bin/busybox", 0o755, bytes.NewReader(bb), int64(len(bb)))
	w.File("init", 0o755, bytes.NewReader([]byte(floodInit)), int64(len(floodInit)))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	d, err := New(vmm.Options{Accel: "auto", CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	spec := vmmtest.Spec(t, vmmtest.Guest{Kernel: k.Vmlinuz, Initrd: initrd, MemoryMiB: 128})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	vm, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A new driver adopts it to stop it, as the next worker would.
		if a, err := d.Recover(context.Background(), spec.StateDir); err == nil {
			_ = a.Stop(context.Background())
		}
		_ = vm.Stop(context.Background())
		vmmtest.AssertGone(t, vm.PID())
	})
	if err := vm.(*VM).Detach(); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(spec.StateDir, fileConsole)
	var peak int64
	var rotated bool
	deadline := time.Now().Add(3 * time.Minute)
	for {
		for _, p := range []string{live, jail.OldLogPath(live)} {
			st, err := os.Stat(p)
			if err != nil {
				continue
			}
			peak = max(peak, st.Size())
			if st.Size() > consoleKeep {
				t.Fatalf("%s: %d bytes, want at most %d", filepath.Base(p), st.Size(), consoleKeep)
			}
			rotated = rotated || p != live && st.Size() > 0
		}
		if bytes.Contains(jail.ReadLog(live, consoleKeep), []byte("\nLAST LINE")) {
			break
		}
		if time.Now().After(deadline) {
			b := jail.ReadLog(live, consoleKeep)
			t.Fatalf("the flood's last line never arrived (largest part %d bytes), console ends %q", peak, b[max(len(b)-200, 0):])
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !rotated {
		t.Errorf("the guest wrote less than %d bytes in %d s: the flood proved nothing", consoleKeep, floodSeconds)
	}
	t.Logf("largest part of the console log on disk: %d bytes (bound %d)", peak, consoleKeep)
}
