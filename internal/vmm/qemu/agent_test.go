package qemu_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/vmmtest"
)

// TestAgentConformance boots the real space-agent as PID 1 on a clone of the
// base template and runs the agent checks of the conformance suite.
func TestAgentConformance(t *testing.T) {
	testenv.RequireVM(t)
	art := testenv.Boot(t)
	vol := testenv.NewVolume(t, art.Agent)
	vmmtest.RunAgent(t, vmmtest.AgentHarness{
		NewDriver: func(t *testing.T) vmm.Driver { return testenv.Driver(t) },
		Guest: func(t *testing.T) vmmtest.Guest {
			disk := filepath.Join(vol.Storage.Root(), "agent-conformance.ext4")
			if err := vol.Storage.Clone(context.Background(), vol.Base.Image, disk); err != nil {
				t.Fatal(err)
			}
			return vmmtest.Guest{Kernel: art.Kernel.Vmlinuz, Initrd: art.Initrd,
				Disks: []vmm.Disk{{Path: disk}}, MemoryMiB: 256}
		},
	})
}
