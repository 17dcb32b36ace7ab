package agentclient

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/budget"
	"github.com/space-sandbox/space/internal/errdefs"
)

// MaxPortConnections is how many port connections (DialPort) one sandbox
// may have open at once: each is one agent-link stream, which holds up to
// one yamux window of the guest's bytes on the host.
const MaxPortConnections = 256

// PortBudget is the budget kind of port connections.
const PortBudget budget.Kind = "port_connections"

// SetPortBudget counts this client's port connections in set, under the
// sandbox's id (a worker shares one set, with metrics, among its
// sandboxes). Without it a client counts them in a set of its own, with
// the limit MaxPortConnections. Call it before the first DialPort.
func (c *Client) SetPortBudget(set *budget.Set, sandbox string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ports, c.portsKey = set, sandbox
}

// portSlot takes one of the sandbox's port-connection slots.
func (c *Client) portSlot() (release func(), err error) {
	c.mu.Lock()
	if c.ports == nil {
		c.ports = budget.New(PortBudget, MaxPortConnections, nil)
	}
	set, key := c.ports, c.portsKey
	c.mu.Unlock()
	release, ok := set.TryAcquire(key)
	if !ok {
		return nil, errdefs.New(errdefs.ErrResourceExhausted,
			"the sandbox already has %d port connections open", set.Limit())
	}
	return release, nil
}

// ListPorts lists the TCP ports listening in the guest, sorted by port.
func (c *Client) ListPorts(ctx context.Context) ([]agentproto.ListeningPort, error) {
	var l agentproto.PortList
	err := c.do(ctx, agentproto.OpPortList, nil, &l)
	return l.Ports, err
}

// DialPort opens a byte stream to port on the guest's loopback over the
// agent link (see worker.Guest.DialPort). ctx bounds the dial only; the
// connection lives until it is closed or the link drops.
func (c *Client) DialPort(ctx context.Context, port uint16) (net.Conn, error) {
	if port == 0 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "port 0 cannot be dialled")
	}
	release, err := c.portSlot()
	if err != nil {
		return nil, err
	}
	d := c.bound(agentproto.OpPortDial)
	dctx, cancel := bounded(ctx, d)
	defer cancel()
	cl, err := c.open(dctx, agentproto.OpPortDial, agentproto.PortDialRequest{Port: port})
	if err != nil {
		release()
		return nil, err
	}
	if err := cl.responseWithin(agentproto.OpPortDial, nil, d); err != nil {
		cl.Close()
		release()
		return nil, err
	}
	// From here the stream outlives ctx: unhook ctx from it.
	if !cl.stop() {
		cl.Close()
		release()
		return nil, linkError(string(agentproto.OpPortDial), dctx, dctx.Err())
	}
	return &portConn{Stream: cl.st, sess: cl.sess, release: release}, nil
}

// portConn is one port connection: a yamux stream, whose window is the
// flow control (a slow reader stalls only its own stream, and the host
// holds at most one window of the guest's unread bytes).
type portConn struct {
	*yamux.Stream
	sess    *yamux.Session
	release func()
	closed  atomic.Bool
	once    sync.Once
}

// drainPoll is how long one read of a closed connection's drain waits
// before it looks again; a Read the caller had blocked when it closed the
// connection returns within it.
const drainPoll = time.Second

// Read reads the guest server's bytes. A link that died is an error, not
// the end of the server's data.
func (p *portConn) Read(b []byte) (int, error) {
	if p.closed.Load() {
		return 0, net.ErrClosed
	}
	n, err := p.Stream.Read(b)
	switch {
	case p.closed.Load():
		return 0, net.ErrClosed
	case err == io.EOF && p.sess.IsClosed():
		err = errdefs.New(errdefs.ErrUnavailable, "agent link dropped during the port connection")
	}
	return n, err
}

func (p *portConn) Write(b []byte) (int, error) {
	n, err := p.Stream.Write(b)
	if err != nil && p.closed.Load() {
		err = net.ErrClosed
	}
	return n, err
}

// CloseWrite half-closes: the guest server reads EOF, its replies still
// flow.
func (p *portConn) CloseWrite() error { return p.Stream.Close() }

// Close ends both directions: it half-closes the stream, and a drain reads
// and drops the guest's remaining bytes until the agent's side ends too
// (it does once the guest server closes, or the link's stream close
// timeout cuts the stream). The slot in the port budget is given back
// then, so a guest server that keeps writing holds a slot of its own
// sandbox, never host memory beyond one window.
func (p *portConn) Close() error {
	p.once.Do(func() {
		p.closed.Store(true)
		_ = p.Stream.Close()
		_ = p.Stream.SetDeadline(time.Now()) // unblock the caller's Read and Write
		go p.drain()
	})
	return nil
}

func (p *portConn) drain() {
	defer p.release()
	buf := make([]byte, 32<<10)
	for {
		_ = p.Stream.SetReadDeadline(time.Now().Add(drainPoll))
		_, err := p.Stream.Read(buf)
		if err != nil && !errors.Is(err, yamux.ErrTimeout) {
			return
		}
	}
}
