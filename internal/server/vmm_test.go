package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/guest"
)

func TestVMMFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    string
		wantErr string
	}{
		{nil, "qemu", ""},
		{[]string{"--vmm", "firecracker"}, "firecracker", ""},
		{[]string{"--vmm", "cloud-hypervisor"}, "", "--vmm must be qemu or firecracker"},
		{[]string{"--vmm", "firecracker", "--accel", "tcg"}, "", "KVM only"},
	} {
		cfg, err := ParseFlags(tc.args)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: err = %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil || cfg.VMM != tc.want {
			t.Errorf("%v: VMM = %q, %v; want %q", tc.args, cfg.VMM, err, tc.want)
		}
	}
}

// TestOpenFirecrackerNamesWhatIsMissing: spaced --vmm firecracker on a
// host without the binary stops at start-up, naming it.
func TestOpenFirecrackerNamesWhatIsMissing(t *testing.T) {
	cfg, err := ParseFlags([]string{"--vmm", "firecracker", "--firecracker", "/nonexistent/firecracker", "--data-dir", t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = openVMM(context.Background(), cfg, guest.Kernel{}, nil)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "/nonexistent/firecracker") {
		t.Fatalf("openVMM = %v, want failed_precondition naming the binary", err)
	}
}
