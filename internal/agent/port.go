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

// portRetry is how often the agent reopens the port while no host is
// connected (a virtio-serial read then returns 0 at once).
const portRetry = 100 * time.Millisecond

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
		err = a.ServeConn(ctx, conn)
		_ = conn.Close()
		if err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
			a.log.Warn("agent link session", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(portRetry):
		}
	}
	return ctx.Err()
}

// fileConn is a character device as a net.Conn.
type fileConn struct{ *os.File }

type portAddr struct{}

func (portAddr) Network() string { return "virtio-serial" }
func (portAddr) String() string  { return agentproto.PortName }

func (c *fileConn) LocalAddr() net.Addr  { return portAddr{} }
func (c *fileConn) RemoteAddr() net.Addr { return portAddr{} }
