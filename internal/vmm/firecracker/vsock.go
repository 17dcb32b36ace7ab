package firecracker

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/jail"
)

// Firecracker's vsock device is "hybrid": guest vsock ports are reached
// from the host through one unix socket (the device's uds_path). A host
// connection asks for a port with "CONNECT <port>\n"; Firecracker answers
// "OK <host port>\n" once the guest accepted, and from then on the
// connection is a plain byte stream to the guest's socket. If nothing
// listens on the port in the guest, Firecracker closes the connection.

// vsockRetry is the pause between attempts while the guest agent is not
// listening yet (the guest is still booting, or was just restored).
const vsockRetry = 20 * time.Millisecond

// handshakeTimeout bounds one CONNECT exchange.
const handshakeTimeout = 5 * time.Second

// dialVsock connects to guest port through the hybrid vsock socket at
// path, retrying until ctx ends while the socket is missing or the guest
// refuses.
func dialVsock(ctx context.Context, path string, port uint32) (net.Conn, error) {
	var last error
	for {
		c, err := connectVsock(ctx, path, port)
		if err == nil {
			return c, nil
		}
		last = err
		t := time.NewTimer(vsockRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("vsock port %d: %w: %v", port, errdefs.ErrUnavailable, last)
		case <-t.C:
		}
	}
}

// connectVsock makes one attempt.
func connectVsock(ctx context.Context, path string, port uint32) (net.Conn, error) {
	// The socket is in the VMM's run dir: never through a symlink.
	c, err := jail.DialUnix(ctx, path)
	if err != nil {
		return nil, err
	}
	dl := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := fmt.Fprintf(c, "CONNECT %d\n", port); err != nil {
		c.Close()
		return nil, err
	}
	line, err := readLine(c, maxAnswer)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("vsock handshake: %v", err)
	}
	if err := parseAnswer(line); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// maxAnswer bounds Firecracker's answer line ("OK <port>" is at most 13
// bytes).
const maxAnswer = 64

// parseAnswer checks Firecracker's answer to CONNECT: "OK <host port>".
func parseAnswer(line string) error {
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "OK" {
		return fmt.Errorf("vsock handshake: unexpected answer %q", line)
	}
	if _, err := strconv.ParseUint(f[1], 10, 32); err != nil {
		return fmt.Errorf("vsock handshake: unexpected answer %q", line)
	}
	return nil
}

// readLine reads up to '\n' one byte at a time, so that nothing after the
// answer (the guest's first bytes) is consumed.
func readLine(c io.Reader, max int) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for len(b) < max {
		if _, err := c.Read(one); err != nil {
			return "", err
		}
		if one[0] == '\n' {
			return string(b), nil
		}
		b = append(b, one[0])
	}
	return "", fmt.Errorf("answer longer than %d bytes", max)
}
