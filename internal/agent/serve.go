package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// requestTimeout bounds how long a new stream may take to send its request.
const requestTimeout = 30 * time.Second

// ServeConn serves link sessions on conn until it ends or ctx is done. Each
// session is the sync handshake, then yamux until the host goes away or a
// protocol error (a new host handshaking on the same stream, as after a
// snapshot restore) ends it; then the agent syncs again on the same stream.
// It returns io.EOF when conn ended (under virtio-serial: no host is
// connected). It does not close conn.
func (a *Agent) ServeConn(ctx context.Context, conn net.Conn) error {
	for {
		if err := a.serveSession(ctx, conn); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (a *Agent) serveSession(ctx context.Context, conn net.Conn) error {
	sc := &sessionConn{Conn: conn}
	synced, err := agentproto.AgentSync(ctx, sc)
	if err != nil {
		return err
	}
	sess, err := agentproto.AgentSession(synced)
	if err != nil {
		return err
	}
	defer func() {
		_ = sess.Close() // returns once yamux's reader and writer stopped
		_ = conn.SetDeadline(time.Time{})
	}()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sctx.Done():
			_ = sess.Close()
		case <-sess.CloseChan():
			cancel()
		}
	}()
	// Debug, as every per-session record: the agent's log is the serial
	// console (an emulated UART), and after a restore the first line written
	// held up the new session by 13-58 ms under TCG.
	a.log.Debug("agent link up")
	defer a.log.Debug("agent link down")
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return nil
		}
		go a.handle(sctx, st)
	}
}

// sessionConn lets yamux "close" the stream without closing it: Close only
// interrupts pending reads and writes, so the next session can sync on the
// same stream.
type sessionConn struct{ net.Conn }

func (c *sessionConn) Close() error { return c.Conn.SetDeadline(time.Now()) }

// ServeListener serves every connection accepted on ln (each is one link
// session) until ctx is done. Used in tests and for vsock.
func (a *Agent) ServeListener(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		go func() {
			defer conn.Close()
			if err := a.ServeConn(ctx, conn); err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
				a.log.Warn("agent link session", "err", err)
			}
		}()
	}
}

// handle serves one yamux stream: one request.
func (a *Agent) handle(ctx context.Context, st net.Conn) {
	defer st.Close()
	_ = st.SetReadDeadline(time.Now().Add(requestTimeout))
	var req agentproto.Request
	if err := agentproto.ReadFrame(st, &req); err != nil {
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	if err := a.dispatch(ctx, st, &req); err != nil {
		if linkGone(err) {
			// The host left before the answer: nobody to answer, and
			// nothing failed on the guest's side.
			a.log.Debug("answer not delivered: the link session ended", "op", req.Op, "err", err)
			return
		}
		_ = reply(st, nil, a.public(req.Op, err))
	}
}

// linkGone says whether err is the link session or the request's stream
// ending under a handler (the host disconnected, or a new host took the
// link over after a restore), rather than the operation failing.
func linkGone(err error) bool {
	return errors.Is(err, yamux.ErrSessionShutdown) || errors.Is(err, yamux.ErrStreamClosed) ||
		errors.Is(err, yamux.ErrConnectionReset) || errors.Is(err, net.ErrClosed)
}

// public keeps tenant-safe errors and replaces anything else by its class.
func (a *Agent) public(op agentproto.Op, err error) error {
	var pub *errdefs.Public
	if errors.As(err, &pub) {
		if pub.Cause != nil {
			a.log.Debug("request failed", "op", op, "err", pub.Message, "cause", pub.Cause)
		}
		return pub
	}
	a.log.Warn("request failed", "op", op, "err", err)
	c := errdefs.ClassOf(err)
	return errdefs.New(c, "%s failed: %s", op, c.Code())
}

func reply(st net.Conn, result any, err error) error {
	var resp agentproto.Response
	if err != nil {
		resp.Error = agentproto.ErrorFrom(err)
	} else if result != nil {
		b, merr := json.Marshal(result)
		if merr != nil {
			return merr
		}
		resp.Result = b
	}
	return agentproto.WriteFrame(st, &resp)
}

func decode(req *agentproto.Request, v any) error {
	if len(req.Args) == 0 {
		return errdefs.New(errdefs.ErrInvalidArgument, "%s: arguments missing", req.Op)
	}
	if err := json.Unmarshal(req.Args, v); err != nil {
		return errdefs.New(errdefs.ErrInvalidArgument, "%s: malformed arguments", req.Op)
	}
	return nil
}

func (a *Agent) streamEvents(ctx context.Context, st net.Conn, r agentproto.EventsRequest) error {
	p, err := a.procs.get(r.ID)
	if err != nil {
		return err
	}
	if err := reply(st, nil, nil); err != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// The client stops early by closing its side.
		_, _ = io.Copy(io.Discard, st)
		cancel()
	}()
	ew := agentproto.NewEventWriter(st, r.Raw)
	_ = p.events(ctx, r.After, func(ev agentproto.Event) error { return ew.Write(&ev) })
	return nil
}
