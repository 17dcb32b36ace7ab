package firecracker

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
)

// Firecracker takes a NIC's tap by name (host_dev_name) and opens it
// itself, in its own network namespace. The worker's vmm.Network hands out
// an fd attached to the sandbox's tap; from it the driver learns the tap's
// name (TUNGETIFF) and namespace (TUNGETDEVNETNS) and gives the tap to the
// VMM's uid (TUNSETOWNER), since an unprivileged process may attach only
// to a tap it owns. The fd is closed before Firecracker attaches: a
// single-queue tap takes one.
type nic struct {
	tap   *os.File // nil without a NIC
	name  string
	netns *os.File
}

// TUNGETDEVNETNS is _IO('T', 227) (linux/if_tun.h); x/sys/unix lacks it.
const tunGetDevNetns = 0x54e3

func openNIC(spec vmm.BootSpec) (*nic, error) {
	n := &nic{}
	if spec.Network == nil {
		return n, nil
	}
	if spec.Network.Tap == nil {
		return nil, fmt.Errorf("firecracker: network without a tap: %w", errdefs.ErrInvalidArgument)
	}
	if _, err := net.ParseMAC(spec.Network.MAC); err != nil {
		return nil, fmt.Errorf("firecracker: network MAC %q: %w", spec.Network.MAC, errdefs.ErrInvalidArgument)
	}
	f, err := spec.Network.Tap()
	if err != nil {
		return nil, fmt.Errorf("firecracker: open tap: %w", err)
	}
	n.tap = f
	if n.name, err = tapName(f); err != nil {
		n.close()
		return nil, fmt.Errorf("firecracker: tap name: %w: %v", errdefs.ErrInternal, err)
	}
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), tunGetDevNetns, 0)
	if errno != 0 {
		n.close()
		return nil, fmt.Errorf("firecracker: tap namespace: %w: %v", errdefs.ErrInternal, errno)
	}
	unix.CloseOnExec(int(fd))
	n.netns = os.NewFile(fd, "netns")
	return n, nil
}

// tapName reads the name of the tap f is attached to.
func tapName(f *os.File) (string, error) {
	var req [unix.IFNAMSIZ + 64]byte
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.TUNGETIFF, uintptr(unsafe.Pointer(&req[0]))); errno != 0 {
		return "", errno
	}
	name, _, _ := bytes.Cut(req[:unix.IFNAMSIZ], []byte{0})
	if len(name) == 0 {
		return "", fmt.Errorf("empty name")
	}
	return string(name), nil
}

// giveTo makes uid the tap's owner.
func (n *nic) giveTo(uid int) error {
	if n.tap == nil {
		return nil
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, n.tap.Fd(), unix.TUNSETOWNER, uintptr(uid)); errno != 0 {
		return fmt.Errorf("firecracker: give the tap to the vmm: %w: %v", errdefs.ErrInternal, errno)
	}
	return nil
}

func (n *nic) close() {
	if n.tap != nil {
		n.tap.Close()
		n.tap = nil
	}
	if n.netns != nil {
		n.netns.Close()
		n.netns = nil
	}
}
