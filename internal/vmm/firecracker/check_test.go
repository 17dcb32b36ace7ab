package firecracker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
)

func TestCheckNamesWhatIsMissing(t *testing.T) {
	d, err := New(vmm.Options{Binary: "/nonexistent/firecracker"})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Check(context.Background())
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "/nonexistent/firecracker not found") {
		t.Fatalf("Check = %v, want failed_precondition naming the binary", err)
	}
	if _, err := d.Start(context.Background(), vmm.BootSpec{ID: "x", StateDir: t.TempDir(), Kernel: "k", VCPUs: 1, MemoryMiB: 128}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Start = %v, want failed_precondition", err)
	}
	if _, err := New(vmm.Options{Accel: "tcg"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("New with accel tcg = %v, want invalid_argument", err)
	}
	// A binary outside /usr cannot run in the jail.
	d, _ = New(vmm.Options{Binary: "/proc/self/exe"})
	if err := d.Check(context.Background()); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "under /usr") {
		t.Errorf("Check of a binary outside /usr = %v", err)
	}
}

// TestProbeKVM runs the KVM probe on this host. Either answer passes: what
// is checked is that it answers within its bound and says why KVM cannot
// be used, in a way the start-up check can show.
func TestProbeKVM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err := ProbeKVM(ctx)
	if err == nil {
		t.Log("/dev/kvm ran the ioctl probe (a few real-mode instructions); whether a kernel boots here is the boot probe's to tell, which needs a Firecracker binary")
		return
	}
	if ctx.Err() != nil {
		t.Fatalf("the probe outlived its bound: %v", err)
	}
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "/dev/kvm") {
		t.Fatalf("ProbeKVM = %v, want failed_precondition naming /dev/kvm", err)
	}
	t.Logf("KVM cannot be used here (after %v): %v", time.Since(start).Round(time.Millisecond), err)
}

// TestProbeBoot: the boot probe passes when the kernel reaches its root
// mount (the stand-in prints what such a kernel prints, then exits as
// Firecracker does on the guest's reboot), fails naming why otherwise,
// and leaves nothing running.
func TestProbeBoot(t *testing.T) {
	r := newRig(t, standinConfig{})
	spec := r.spec("probe-files")
	if err := r.d.ProbeBoot(context.Background(), spec.Kernel); err != nil {
		t.Fatalf("ProbeBoot: %v", err)
	}
	calls := r.calls()
	if n := names(calls); !strings.Contains(n, "PUT /actions") || strings.Contains(n, "/drives/") || strings.Contains(n, "/network-interfaces/") {
		t.Errorf("probe calls: %s", n)
	}
	r = newRig(t, standinConfig{Fail: "PUT /actions"})
	if err := r.d.ProbeBoot(context.Background(), spec.Kernel); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "probe VM did not start") {
		t.Fatalf("ProbeBoot with a failing start = %v", err)
	}
}
