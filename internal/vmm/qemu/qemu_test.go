package qemu_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/qemu"
	"github.com/space-sandbox/space/internal/vmm/vmmtest"
)

// requireQEMU skips when the QEMU binary is missing.
func requireQEMU(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(qemu.DefaultBinary); err != nil {
		t.Skipf("needs %s (Debian package qemu-system-x86)", qemu.DefaultBinary)
	}
}

func TestConformance(t *testing.T) {
	requireQEMU(t)
	cache := t.TempDir()
	vmmtest.Run(t, vmmtest.Harness{
		NewDriver: func(t *testing.T) vmm.Driver {
			d, err := vmm.Open(qemu.Name, vmm.Options{Accel: "auto", CacheDir: cache})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Guest: func(t *testing.T) vmmtest.Guest { return vmmtest.BusyboxGuest(t) },
	})
}

func TestMissingBinary(t *testing.T) {
	d, err := qemu.New(vmm.Options{Binary: "/nonexistent/qemu-system-x86_64"})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Check(context.Background())
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Check = %v, want failed_precondition", err)
	}
	_, err = d.Start(context.Background(), vmm.BootSpec{ID: "x", StateDir: t.TempDir(), Kernel: "k", VCPUs: 1, MemoryMiB: 128})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Start = %v, want failed_precondition", err)
	}
	if want := "qemu-system-x86"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the package %s", err, want)
	}
}

func TestBadAccel(t *testing.T) {
	if _, err := vmm.Open(qemu.Name, vmm.Options{Accel: "hvf"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("Open with accel hvf = %v, want invalid_argument", err)
	}
}
