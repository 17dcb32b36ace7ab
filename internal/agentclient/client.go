// Package agentclient is the host side of the agent link: it dials the guest
// agent, runs the sync handshake and yamux, reconnects when the link drops,
// and offers typed calls for every agentproto operation. Agent errors come
// back as errdefs errors of the class the agent reported; link failures are
// errdefs.ErrUnavailable.
package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/budget"
	"github.com/space-sandbox/space/internal/errdefs"
)

// DialFunc opens a new byte stream to the agent (e.g. vmm.VM.DialAgent).
type DialFunc func(ctx context.Context) (net.Conn, error)

// Client talks to one guest agent. It is safe for concurrent use; calls
// share one link, which is (re)established on demand.
type Client struct {
	dial DialFunc
	log  *slog.Logger

	// mu guards the fields below. It is never held while dialling or
	// handshaking: the dial function may take its owner's locks (a
	// sandbox's, whose release closes this client under them), and a
	// guest that never completes the handshake must not hold up Close.
	mu       sync.Mutex
	sess     *yamux.Session
	conn     net.Conn
	dialing  *dialCall // the dial in progress, if any
	closed   bool
	timeouts Timeouts

	// ports counts the open port connections, under portsKey (see
	// SetPortBudget); guarded by mu.
	ports    *budget.Set
	portsKey string

	// onAbuse, if set, is told of every link dropped because the guest
	// broke its bounds (OnLinkAbuse).
	onAbuse func()
}

// dialCall is one dial in progress, which concurrent calls share.
type dialCall struct {
	done      chan struct{} // closed when the dial ended
	cancel    context.CancelFunc
	abandoned bool // Close or Disconnect came during it: its result is not the link
	err       error
	// retry says the waiting calls should dial themselves: the dial was
	// abandoned, or ended because its own caller left.
	retry bool
}

// New returns a Client that dials with dial. It does not connect until the
// first call. log may be nil.
func New(dial DialFunc, log *slog.Logger) *Client {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{dial: dial, log: log, timeouts: DefaultTimeouts()}
}

// OnLinkAbuse has f called (after the Warn it logs) each time a link
// session is dropped because the guest broke one of the link's bounds, so
// the owner can count it. Call it before the client's first call.
func (c *Client) OnLinkAbuse(f func()) { c.onAbuse = f }

var errClosed = errdefs.New(errdefs.ErrUnavailable, "agent client closed")

// Close drops the link; later calls fail. It does not wait for a dial in
// progress: it cancels it, and the dial's link is dropped when it ends.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.dropLocked()
	return nil
}

// Disconnect drops the current link (if any); the next call redials. Use it
// when the transport is known to be replaced, e.g. after a snapshot restore.
// A dial in progress is abandoned, and the calls waiting for it dial anew.
func (c *Client) Disconnect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked()
}

func (c *Client) dropLocked() {
	if d := c.dialing; d != nil {
		d.abandoned = true
		d.cancel()
		c.dialing = nil
	}
	if c.sess != nil {
		_ = c.sess.Close()
		c.sess = nil
	}
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

// session returns a live yamux session, dialling and syncing if needed.
// One dial runs at a time, without c.mu; concurrent calls wait for it.
func (c *Client) session(ctx context.Context) (*yamux.Session, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, errClosed
		}
		if c.sess != nil && !c.sess.IsClosed() {
			sess := c.sess
			c.mu.Unlock()
			return sess, nil
		}
		if d := c.dialing; d != nil {
			c.mu.Unlock()
			select {
			case <-d.done:
			case <-ctx.Done():
				return nil, linkError("dial agent", ctx, ctx.Err())
			}
			// The dial that ended was another call's, under its own
			// context: if it failed for a reason of its caller's, try
			// again under ours.
			if d.err != nil && !d.retry {
				return nil, d.err
			}
			continue
		}
		c.dropLocked()
		dctx, cancel := bounded(ctx, c.timeouts.Connect)
		dctx, cancelDial := context.WithCancel(dctx)
		d := &dialCall{done: make(chan struct{}), cancel: cancelDial}
		c.dialing = d
		c.mu.Unlock()

		sess, conn, err := c.connect(dctx)
		cancelDial()
		cancel()

		c.mu.Lock()
		if d.abandoned {
			if sess != nil {
				_ = sess.Close()
				_ = conn.Close()
			}
			sess, err = nil, errdefs.New(errdefs.ErrUnavailable, "the agent link was reset while connecting")
		} else {
			c.dialing = nil
			c.sess, c.conn = sess, conn
		}
		d.err, d.retry = err, d.abandoned || ctx.Err() != nil
		close(d.done)
		closed := c.closed
		c.mu.Unlock()
		switch {
		case sess != nil:
			return sess, nil
		case closed:
			return nil, errClosed
		case d.abandoned && ctx.Err() == nil:
			continue // Disconnect: dial the new transport
		}
		return nil, err
	}
}

// connect dials, syncs and starts a session on the new connection.
func (c *Client) connect(ctx context.Context) (*yamux.Session, net.Conn, error) {
	t0 := time.Now()
	conn, synced, err := c.dialSynced(ctx)
	if err != nil {
		return nil, nil, err
	}
	sess, err := agentproto.HostSession(synced, func(err error) {
		c.log.Warn("agent link dropped: the guest broke its bounds", "err", err)
		if c.onAbuse != nil {
			c.onAbuse()
		}
	})
	if err != nil {
		_ = conn.Close()
		return nil, nil, linkError("agent session", ctx, err)
	}
	c.log.Debug("agent link up", "took", time.Since(t0))
	return sess, conn, nil
}

// firstSyncWait bounds the handshake on a link's first connection; each
// redial waits twice as long, all within the Connect bound.
const firstSyncWait = time.Second

// dialSynced dials and runs the sync handshake, redialling when a
// connection's handshake goes unanswered. A VM resumed after a pause in
// which its host went away and a new one connected was seen (QEMU, 1 in
// ~10 such resumes under load) to pass the host's bytes to the agent but
// none of the agent's back on that connection, for as long as it lasted;
// a new connection resets the port and the handshake comes up.
func (c *Client) dialSynced(ctx context.Context) (net.Conn, net.Conn, error) {
	wait := firstSyncWait
	for {
		conn, err := c.dial(ctx)
		if err != nil {
			return nil, nil, linkError("dial agent", ctx, err)
		}
		attempt, cancel := context.WithTimeout(ctx, wait)
		synced, err := agentproto.HostSync(attempt, conn)
		unanswered := errors.Is(attempt.Err(), context.DeadlineExceeded)
		cancel()
		if err == nil {
			return conn, synced, nil
		}
		_ = conn.Close()
		if ctx.Err() != nil || !unanswered {
			return nil, nil, linkError("agent handshake", ctx, err)
		}
		c.log.Debug("agent handshake unanswered; redialling", "waited", wait)
		wait *= 2
	}
}

// linkError classifies a transport failure: the caller's own deadline or
// cancellation keeps its class, anything else means the agent is
// unreachable right now.
func linkError(what string, ctx context.Context, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrDeadlineExceeded, err)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrCancelled, err)
	}
	var pub *errdefs.Public
	if errors.As(err, &pub) {
		return err
	}
	return fmt.Errorf("%s: %w: %w", what, errdefs.ErrUnavailable, err)
}

// open opens a stream for one request and sends it. The stream is closed
// when ctx is done, which interrupts any read or write on it.
func (c *Client) open(ctx context.Context, op agentproto.Op, args any) (*call, error) {
	var raw json.RawMessage
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return nil, err
		}
		raw = b
	}
	for attempt := 0; ; attempt++ {
		sess, err := c.session(ctx)
		if err != nil {
			return nil, err
		}
		st, err := sess.OpenStream()
		if err != nil {
			// The link died under us: one redial, then give up.
			c.mu.Lock()
			if c.sess == sess {
				c.dropLocked()
			}
			c.mu.Unlock()
			if attempt == 0 && ctx.Err() == nil {
				continue
			}
			return nil, linkError("open agent stream", ctx, err)
		}
		cl := &call{st: st, sess: sess, ctx: ctx}
		cl.stop = context.AfterFunc(ctx, func() { _ = st.SetDeadline(time.Now()) })
		if err := agentproto.WriteFrame(st, &agentproto.Request{Op: op, Args: raw}); err != nil {
			cl.Close()
			return nil, linkError(string(op), ctx, err)
		}
		return cl, nil
	}
}

// call is one request's stream.
type call struct {
	st   *yamux.Stream
	sess *yamux.Session
	ctx  context.Context
	stop func() bool
	once sync.Once
}

// response reads the Response frame and decodes its result into out.
func (cl *call) response(op agentproto.Op, out any) error {
	var resp agentproto.Response
	if err := agentproto.ReadFrame(cl.st, &resp); err != nil {
		return linkError(string(op), cl.ctx, err)
	}
	return cl.decode(op, resp, out)
}

// responseWithin is response for streaming calls, whose caller's context
// bounds the whole transfer: the agent's first answer must come within d.
func (cl *call) responseWithin(op agentproto.Op, out any, d time.Duration) error {
	_ = cl.st.SetReadDeadline(time.Now().Add(d))
	var resp agentproto.Response
	err := agentproto.ReadFrame(cl.st, &resp)
	if err != nil {
		if cl.ctx.Err() == nil && errors.Is(err, yamux.ErrTimeout) {
			return errdefs.New(errdefs.ErrDeadlineExceeded, "the sandbox's agent did not answer %s within %s", op, d)
		}
		return linkError(string(op), cl.ctx, err)
	}
	_ = cl.st.SetReadDeadline(time.Time{})
	if cl.ctx.Err() != nil {
		_ = cl.st.SetDeadline(time.Now()) // cancelled meanwhile: keep it cut
	}
	return cl.decode(op, resp, out)
}

func (cl *call) decode(op agentproto.Op, resp agentproto.Response, out any) error {
	if err := resp.Decode(out); err != nil {
		if resp.Error != nil {
			return err
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

func (cl *call) Close() {
	cl.once.Do(func() {
		cl.stop()
		_ = cl.st.Close()
	})
}

// idempotent operations are retried once when the link dies under them
// (the request may or may not have reached the agent).
var idempotent = map[agentproto.Op]bool{
	agentproto.OpPing: true, agentproto.OpConfigure: true, agentproto.OpGet: true, agentproto.OpList: true,
	agentproto.OpResize: true, agentproto.OpStat: true, agentproto.OpListDir: true,
	agentproto.OpFreeze: true, agentproto.OpThaw: true,
}

// do runs a simple request/response call, bounded by callTimeout.
func (c *Client) do(ctx context.Context, op agentproto.Op, args, out any) error {
	ctx, cancel := bounded(ctx, c.bound(op))
	defer cancel()
	for attempt := 0; ; attempt++ {
		cl, err := c.open(ctx, op, args)
		if err != nil {
			return err
		}
		err = cl.response(op, out)
		cl.Close()
		if err != nil && attempt == 0 && idempotent[op] && cl.sess.IsClosed() && ctx.Err() == nil {
			continue
		}
		return err
	}
}

// rawReader is the raw byte phase of a stream, for ReadFile and TarOut.
type rawReader struct{ cl *call }

func (r *rawReader) Read(p []byte) (int, error) {
	n, err := r.cl.st.Read(p)
	if err == io.EOF && r.cl.sess.IsClosed() {
		// yamux ends every stream with EOF when the session dies: this
		// may be a cut, not the end.
		err = errdefs.New(errdefs.ErrUnavailable, "agent link dropped during transfer")
	}
	if err != nil && err != io.EOF {
		err = linkError("read from agent", r.cl.ctx, err)
	}
	return n, err
}

func (r *rawReader) Close() error { r.cl.Close(); return nil }
