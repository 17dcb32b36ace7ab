package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// portRetry bounds one wait for a host on the port; it is only a safety
// net, since waitHost wakes on the port-open event itself.
const portRetry = time.Second

// FindPort returns the device of the virtio-serial port called name
// (/sys/class/virtio-ports/vportNpM/name -> /dev/vportNpM).
func FindPort(name string) (string, error) {
	dirs, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err == nil && strings.TrimSpace(string(b)) == name {
			return "/dev/" + filepath.Base(filepath.Dir(p)), nil
		}
	}
	return "", errdefs.New(errdefs.ErrNotFound, "virtio port %q not found", name)
}

// ServePort serves the link over a virtio-serial port device until ctx is
// done. Each session gets a fresh open of the port so that a session that
// is still blocked writing cannot leak bytes into the next one.
func (a *Agent) ServePort(ctx context.Context, dev string) error {
	for ctx.Err() == nil {
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err != nil {
			return errdefs.New(errdefs.ErrUnavailable, "open agent port").WithCause(err)
		}
		// Nonblocking, so the runtime poller drives it and deadlines and
		// Close interrupt a blocked read or write.
		conn := &fileConn{File: os.NewFile(uintptr(fd), dev)}
		waitHost(ctx, conn.File, portRetry)
		err = a.ServeConn(ctx, conn)
		_ = conn.Close()
		if err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
			a.log.Warn("agent link session", "err", err)
		}
	}
	return ctx.Err()
}

// waitHost returns once a host is connected to the port behind f, ctx is
// done or max has passed. virtio_console reports POLLHUP while no host is
// connected and wakes the port's wait queue when the host side opens (the
// VIRTIO_CONSOLE_PORT_OPEN control event, as when the worker dials a just
// restored VM). The runtime poller watches the fd edge-triggered, so a
// write-wait parks until that wake-up; each time it checks the state
// without consuming data. Sleeping instead would add up to the sleep to
// every reconnection after a restore.
func waitHost(ctx context.Context, f *os.File, max time.Duration) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = f.SetWriteDeadline(time.Now().Add(max))
	defer f.SetWriteDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Now()) })
	defer stop()
	_ = rc.Write(func(fd uintptr) bool {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLOUT}}
		if _, err := unix.Poll(p, 0); err != nil {
			return true
		}
		return p[0].Revents&unix.POLLHUP == 0
	})
}

// fileConn is a character device as a net.Conn.
type fileConn struct{ *os.File }

type portAddr struct{}

func (portAddr) Network() string { return "virtio-serial" }
func (portAddr) String() string  { return agentproto.PortName }

func (c *fileConn) LocalAddr() net.Addr  { return portAddr{} }
func (c *fileConn) RemoteAddr() net.Addr { return portAddr{} }
