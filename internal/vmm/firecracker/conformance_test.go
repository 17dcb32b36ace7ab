package firecracker_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/guest"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/firecracker"
	"github.com/space-sandbox/space/internal/vmm/vmmtest"
)

// The conformance suites run against a real Firecracker when the host can
// run one: SPACE_FIRECRACKER_BIN names the binary (under /usr, as the jail
// requires) and /dev/kvm boots a probe guest. Where that is not so (no
// Firecracker package exists for our machines, and their KVM hangs real
// guests), the tests pass saying plainly that the real run did not happen
// and why; the stand-in tests (driver_test.go) are what checks the driver
// there, against the API specification.

const envBinary = "SPACE_FIRECRACKER_BIN"

// realFirecracker returns a driver on the real binary and the guest
// kernel as Firecracker boots it, or why the real run is not possible.
func realFirecracker(t *testing.T) (vmm.Driver, guest.Kernel, string, string) {
	t.Helper()
	// The ioctl probe runs a few real-mode instructions; whether a kernel
	// boots is the boot probe's to say, which needs the binary.
	kvm := "/dev/kvm runs the ioctl probe (a real-mode snippet, not a kernel boot)"
	if err := firecracker.ProbeKVM(context.Background()); err != nil {
		kvm = err.Error()
	}
	bin := os.Getenv(envBinary)
	if bin == "" {
		return nil, guest.Kernel{}, "", fmt.Sprintf("%s is not set (no Firecracker binary on this host); %s", envBinary, kvm)
	}
	if os.Geteuid() != 0 {
		return nil, guest.Kernel{}, "", "the jailed VMM needs root"
	}
	d, err := firecracker.New(vmm.Options{Binary: bin})
	if err != nil {
		return nil, guest.Kernel{}, "", err.Error()
	}
	if err := d.Check(context.Background()); err != nil {
		return nil, guest.Kernel{}, "", err.Error()
	}
	k, err := guest.Locate(guest.KernelDirFromEnv())
	if err != nil {
		return nil, guest.Kernel{}, "", err.Error()
	}
	vmlinux, err := guest.Vmlinux(k, filepath.Join(os.TempDir(), "space-fc-test-kernel"))
	if err != nil {
		return nil, guest.Kernel{}, "", err.Error()
	}
	if err := d.CheckGuest(context.Background(), k, vmlinux); err != nil {
		return nil, guest.Kernel{}, "", err.Error()
	}
	return d, k, vmlinux, ""
}

func notRun(t *testing.T, why string) {
	t.Logf("NOT RUN against a real Firecracker: %s. The driver was checked only against the API specification (the stand-in tests in this package).", why)
}

func TestConformance(t *testing.T) {
	_, k, vmlinux, why := realFirecracker(t)
	if why != "" {
		notRun(t, why)
		return
	}
	bin := os.Getenv(envBinary)
	vmmtest.Run(t, vmmtest.Harness{
		NewDriver: func(t *testing.T) vmm.Driver {
			d2, err := firecracker.New(vmm.Options{Binary: bin})
			if err != nil {
				t.Fatal(err)
			}
			return d2
		},
		Guest: func(t *testing.T) vmmtest.Guest { return vsockGuest(t, k, vmlinux) },
		// KVM: far quicker than the TCG default.
		Timeout: time.Minute,
	})
}

// TestAgentConformance runs the real space-agent (on its vsock link) as
// PID 1 on a clone of the base template.
func TestAgentConformance(t *testing.T) {
	d, _, vmlinux, why := realFirecracker(t)
	if why != "" {
		notRun(t, why)
		return
	}
	art := testenv.Boot(t)
	vol := testenv.NewVolume(t, art.Agent)
	vmmtest.RunAgent(t, vmmtest.AgentHarness{
		NewDriver: func(t *testing.T) vmm.Driver { return d },
		Guest: func(t *testing.T) vmmtest.Guest {
			disk := filepath.Join(vol.Storage.Root(), "agent-conformance.ext4")
			if err := vol.Storage.Clone(context.Background(), vol.Base.Image, disk); err != nil {
				t.Fatal(err)
			}
			return vmmtest.Guest{Kernel: vmlinux, Initrd: art.Initrd, Disks: []vmm.Disk{{Path: disk}}, MemoryMiB: 256}
		},
		Timeout: time.Minute,
	})
}

// vsockGuest is vmmtest's busybox guest for Firecracker: the same disk and
// greeting, written on the vsock link by testdata/greeter as /init.
func vsockGuest(t *testing.T, k guest.Kernel, vmlinux string) vmmtest.Guest {
	t.Helper()
	g := vmmtest.BusyboxGuest(t) // the disk and the sizes
	dir := t.TempDir()
	greeter := filepath.Join(dir, "greeter")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", greeter, "./testdata/greeter")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the test guest's init: %v\n%s", err, out)
	}
	mods, err := guest.ResolveModules(k, []string{"virtio_mmio", "virtio_blk", "vsock", "vmw_vsock_virtio_transport"})
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(greeter)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := guest.NewCPIOWriter(&buf)
	for _, d := range []string{"lib", "lib/mod", "proc", "sys", "dev"} {
		w.Dir(d, 0o755)
	}
	w.File("init", 0o755, bytes.NewReader(bin), int64(len(bin)))
	for i, m := range mods {
		data, err := os.ReadFile(filepath.Join(k.ModulesDir, m.Path))
		if err != nil {
			t.Fatal(err)
		}
		w.File(fmt.Sprintf("lib/mod/%02d-%s.ko", i, m.Name), 0o644, bytes.NewReader(data), int64(len(data)))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := os.WriteFile(initrd, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	g.Kernel, g.Initrd = vmlinux, initrd
	return g
}
