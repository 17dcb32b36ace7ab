package network

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// TapOptions tune how OpenTap attaches to the sandbox's tap.
type TapOptions struct {
	// VnetHdr asks for a virtio-net header on each frame (what QEMU's
	// vhost/offload path wants); plain frames otherwise.
	VnetHdr bool
}

// tunSetIff attaches fd to (or creates) the tap called name in the calling
// thread's namespace.
func tunSetIff(fd uintptr, name string, flags uint16) error {
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:unix.IFNAMSIZ-1], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = flags
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(unix.TUNSETIFF), uintptr(unsafe.Pointer(&req[0]))); errno != 0 {
		return errno
	}
	return nil
}

// createTap makes a persistent tap so the namespace can be configured before
// any VM opens it. The calling thread must be in the sandbox namespace.
func createTap(name string) error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/net/tun: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	defer unix.Close(fd)
	if err := tunSetIff(uintptr(fd), name, unix.IFF_TAP|unix.IFF_NO_PI); err != nil {
		return fmt.Errorf("create tap %s: %w", name, errors.Join(errdefs.ErrInternal, err))
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(unix.TUNSETPERSIST), 1); errno != 0 {
		return fmt.Errorf("persist tap %s: %w", name, errors.Join(errdefs.ErrInternal, errno))
	}
	return nil
}

// OpenTap returns an fd attached to the sandbox's tap, for QEMU's
// `-netdev tap,id=net0,fd=N` (pass it in exec.Cmd.ExtraFiles: fd N = 3+index).
// The fd works from any namespace once open. Closing it detaches the VM; the
// tap and its configuration stay.
func (s *Sandbox) OpenTap(opts TapOptions) (*os.File, error) {
	var f *os.File
	err := InNamespace(s.Path(), func() error {
		// A wake slot's take that a crash cut short (tapmove.go) must not
		// leave this VMM a new, unconfigured tap.
		nl, err := netlink.NewHandle()
		if err != nil {
			return fmt.Errorf("netlink in netns: %w", errors.Join(errdefs.ErrInternal, err))
		}
		err = undoInterruptedMove(nl)
		nl.Close()
		if err != nil {
			return err
		}
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", errors.Join(errdefs.ErrUnavailable, err))
		}
		flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if opts.VnetHdr {
			flags |= unix.IFF_VNET_HDR
		}
		if err := tunSetIff(uintptr(fd), TapName, flags); err != nil {
			unix.Close(fd)
			return fmt.Errorf("attach tap: %w", errors.Join(errdefs.ErrInternal, err))
		}
		f = os.NewFile(uintptr(fd), TapName)
		return nil
	})
	return f, err
}

// Start starts cmd with the sandbox's namespace as its network namespace, so
// QEMU can use `-netdev tap,ifname=tap0,script=no,downscript=no` by name. The
// child is forked from a thread that has joined the namespace; it inherits
// nothing else from it.
func (s *Sandbox) Start(cmd *exec.Cmd) error {
	return InNamespace(s.Path(), func() error {
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s in sandbox netns: %w", cmd.Path, errors.Join(errdefs.ErrInternal, err))
		}
		return nil
	})
}
