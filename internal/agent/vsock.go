package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// The agent's link is one byte stream to the host: the virtio-serial port
// under QEMU (port.go), a vsock connection under Firecracker (here). The
// agent takes whichever device the VM has, so one guest image serves both
// drivers.

// virtioVsockID is the virtio device ID of a vsock device (virtio spec
// 5.10), as /sys/bus/virtio/devices/*/device shows it.
const virtioVsockID = "0x0013"

// HasVsockDevice reports whether the VM has a virtio vsock device.
func HasVsockDevice() bool {
	ids, _ := filepath.Glob("/sys/bus/virtio/devices/*/device")
	for _, p := range ids {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == virtioVsockID {
			return true
		}
	}
	return false
}

// waitLink waits for the agent's link device and serves it until ctx is
// done: vsock when the VM has a vsock device, else the virtio-serial port.
func (a *Agent) waitLink(ctx context.Context, log *slog.Logger) {
	for ctx.Err() == nil {
		if HasVsockDevice() {
			log.Info("agent serving", "vsock_port", agentproto.VsockPort)
			if err := a.ServeVsock(ctx, agentproto.VsockPort); err != nil && ctx.Err() == nil {
				log.Error("agent vsock link", "err", err)
			}
			return
		}
		dev, err := FindPort(agentproto.PortName)
		if err == nil {
			log.Info("agent serving", "port", dev)
			_ = a.ServePort(ctx, dev)
			return
		}
		log.Warn("waiting for agent port", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// ServeVsock listens on vsock port and serves the link on the connections
// the host makes, one session at a time: a new connection (the host
// redialled, as after every restore) ends the previous session first, so
// that a session still blocked on a dead connection cannot hold the link.
func (a *Agent) ServeVsock(ctx context.Context, port uint32) error {
	l, err := ListenVsock(port)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	defer l.Close()
	var prev net.Conn
	var prevDone chan struct{}
	defer func() {
		if prev != nil {
			prev.Close()
			<-prevDone
		}
	}()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errdefs.New(errdefs.ErrUnavailable, "accept on agent vsock").WithCause(err)
		}
		if prev != nil {
			prev.Close()
			<-prevDone
		}
		done := make(chan struct{})
		prev, prevDone = conn, done
		go func() {
			defer close(done)
			err := a.ServeConn(ctx, conn)
			_ = conn.Close()
			if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
				a.log.Warn("agent link session", "err", err)
			}
		}()
	}
}

// ListenVsock listens on port of any of the guest's CIDs.
func ListenVsock(port uint32) (net.Listener, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrUnavailable, "vsock socket").WithCause(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		unix.Close(fd)
		return nil, errdefs.New(errdefs.ErrUnavailable, "bind vsock port %d", port).WithCause(err)
	}
	if err := unix.Listen(fd, 4); err != nil {
		unix.Close(fd)
		return nil, errdefs.New(errdefs.ErrUnavailable, "listen on vsock port %d", port).WithCause(err)
	}
	// Nonblocking, so the runtime poller drives accept and Close ends it.
	return &vsockListener{f: os.NewFile(uintptr(fd), "vsock"), port: port}, nil
}

type vsockListener struct {
	f    *os.File
	port uint32
}

func (l *vsockListener) Accept() (net.Conn, error) {
	rc, err := l.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var aerr error
	err = rc.Read(func(fd uintptr) bool {
		nfd, _, aerr = unix.Accept4(int(fd), unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		return !errors.Is(aerr, unix.EAGAIN)
	})
	if err != nil {
		return nil, err
	}
	if aerr != nil {
		return nil, aerr
	}
	return &vsockConn{File: os.NewFile(uintptr(nfd), "vsock-conn"), port: l.port}, nil
}

func (l *vsockListener) Close() error   { return l.f.Close() }
func (l *vsockListener) Addr() net.Addr { return vsockAddr{l.port} }

// vsockConn is an accepted vsock connection as a net.Conn.
type vsockConn struct {
	*os.File
	port uint32
}

func (c *vsockConn) LocalAddr() net.Addr  { return vsockAddr{c.port} }
func (c *vsockConn) RemoteAddr() net.Addr { return vsockAddr{unix.VMADDR_CID_HOST} }

type vsockAddr struct{ port uint32 }

func (vsockAddr) Network() string  { return "vsock" }
func (a vsockAddr) String() string { return fmt.Sprintf("vsock:%d", a.port) }
