package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// portDialTimeout bounds the dial of one loopback address: a listener
// whose accept backlog is full does not answer at all.
const portDialTimeout = 2 * time.Second

// dialPort serves OpPortDial: it connects to the port on the guest's
// loopback, answers, then copies bytes both ways between the stream and
// the connection until both directions have ended.
func (a *Agent) dialPort(ctx context.Context, st net.Conn, r agentproto.PortDialRequest) error {
	if r.Port == 0 {
		return errdefs.New(errdefs.ErrInvalidArgument, "port 0 cannot be dialled")
	}
	conn, err := dialLoopback(ctx, r.Port)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := reply(st, nil, nil); err != nil {
		return nil
	}
	splice(ctx, st, conn)
	return nil
}

// dialLoopback connects to 127.0.0.1:port, then [::1]:port.
func dialLoopback(ctx context.Context, port uint16) (*net.TCPConn, error) {
	var first error
	for _, host := range []string{"127.0.0.1", "::1"} {
		dctx, cancel := context.WithTimeout(ctx, portDialTimeout)
		var d net.Dialer
		c, err := d.DialContext(dctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(port))))
		cancel()
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		if first == nil {
			first = err
		}
	}
	if errors.Is(first, syscall.ECONNREFUSED) {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "nothing listens on port %d", port)
	}
	return nil, errdefs.New(errdefs.ErrUnavailable, "port %d did not accept a connection", port).WithCause(first)
}

// splice copies st to conn and conn to st. The end of one side's data
// (the host's half-close, the guest server's FIN) half-closes the other
// side in that direction; an error in either direction (the link gone,
// the server reset) ends both. It returns once both directions ended; the
// caller closes both.
func splice(ctx context.Context, st net.Conn, conn *net.TCPConn) {
	var once sync.Once
	abort := func() {
		once.Do(func() {
			_ = st.SetDeadline(time.Now())
			_ = conn.SetLinger(0) // a reset: the server must not take it for a clean end
			_ = conn.Close()
		})
	}
	stop := context.AfterFunc(ctx, abort)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Host to guest: the link dying mid-way is not the end of the data.
		if _, err := io.Copy(conn, uploadReader(st)); err != nil {
			abort()
			return
		}
		_ = conn.CloseWrite()
	}()
	if _, err := io.Copy(st, conn); err != nil {
		abort()
	} else {
		_ = st.Close() // yamux: a half-close, the host reads EOF
	}
	<-done
}
