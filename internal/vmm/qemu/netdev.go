package qemu

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
)

// netFiles opens the VM's tap (if it has a NIC) for exec.Cmd.ExtraFiles.
// The caller closes the files once QEMU started.
func netFiles(spec vmm.BootSpec) ([]*os.File, error) {
	if spec.Network == nil {
		return nil, nil
	}
	if spec.Network.Tap == nil {
		return nil, fmt.Errorf("qemu: network without a tap: %w", errdefs.ErrInvalidArgument)
	}
	if _, err := net.ParseMAC(spec.Network.MAC); err != nil {
		return nil, fmt.Errorf("qemu: network MAC %q: %w", spec.Network.MAC, errdefs.ErrInvalidArgument)
	}
	f, err := spec.Network.Tap()
	if err != nil {
		return nil, fmt.Errorf("qemu: open tap: %w", err)
	}
	return []*os.File{f}, nil
}

// netArgs is the NIC on the command line: a virtio-net-device on the tap
// QEMU inherits as tapFD. It comes after every other device, so VMs
// without a NIC keep their device layout.
func netArgs(spec vmm.BootSpec, tapFD int) []string {
	if spec.Network == nil {
		return nil
	}
	return []string{
		"-netdev", fmt.Sprintf("tap,id=net0,fd=%d", tapFD),
		"-device", "virtio-net-device,netdev=net0,mac=" + spec.Network.MAC,
	}
}

func closeFiles(fs []*os.File) error {
	var errs []error
	for _, f := range fs {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
