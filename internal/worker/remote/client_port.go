package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/workerpb"
)

// portChunkBytes bounds the data of one DialPort message either way. With
// one chunk in hand per direction (and the HTTP/2 stream window), a port
// connection holds a bounded amount however slow either end is.
const portChunkBytes = 64 << 10

// portChunksAhead is how many received chunks may wait for Read, so the
// stream is read on while the reader works (at most 512 KiB beyond the
// HTTP/2 stream window).
const portChunksAhead = 8

func (g *guest) ListPorts(ctx context.Context) ([]agentproto.ListeningPort, error) {
	resp, err := call(ctx, "list ports", true, g.c.ports.ListPorts, &workerpb.ListPortsRequest{SandboxId: g.sandbox})
	if err != nil {
		return nil, err
	}
	return each(resp.GetPorts(), portFromPB), nil
}

// DialPort opens one DialPort stream: ctx bounds the dial (until Opened);
// the conn lives until it is closed, or until the Client is.
func (g *guest) DialPort(ctx context.Context, port uint16) (net.Conn, error) {
	streamCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopClient := context.AfterFunc(g.c.closing, cancel)
	stopDial := context.AfterFunc(ctx, cancel)
	stream := g.c.ports.DialPort(streamCtx)
	fail := func(err error) (net.Conn, error) {
		stopClient()
		cancel()
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
		return nil, err
	}
	hdr := &workerpb.DialPortRequest{Kind: &workerpb.DialPortRequest_Header{Header: &workerpb.DialPortHeader{
		SandboxId: g.sandbox, Port: uint32(port)}}}
	// A Send the server refused is io.EOF; Receive says why.
	if err := stream.Send(hdr); err != nil && !errors.Is(err, io.EOF) {
		stopDial()
		return fail(fromWire(ctx, "dial port", err))
	}
	first, err := stream.Receive()
	if !stopDial() {
		return fail(fromWire(ctx, "dial port", context.Cause(ctx)))
	}
	if errors.Is(err, io.EOF) {
		return fail(protocolError("dial port", "the stream ended before Opened"))
	}
	if err != nil {
		return fail(fromWire(ctx, "dial port", err))
	}
	if first.GetOpened() == nil {
		return fail(protocolError("dial port", "the first message is not Opened"))
	}
	c := &portConn{
		stream: stream, cancel: func() { stopClient(); cancel() },
		local: portAddr("worker-protocol"), remote: portAddr(fmt.Sprintf("%s:%d", g.sandbox, port)),
		chunks: make(chan []byte, portChunksAhead), writes: make(chan *workerpb.DialPortRequest),
		sendFailed: make(chan struct{}), closed: make(chan struct{}),
	}
	c.rdeadline.init()
	c.wdeadline.init()
	c.pumps.Add(2)
	go c.receive()
	go c.send()
	return c, nil
}

// portConn is a net.Conn over one DialPort stream. A goroutine receives
// (queueing at most portChunksAhead chunks for Read beyond the stream's
// window) and one sends (taking one message at a time from Write), so
// deadlines interrupt a blocked Read or Write without touching the stream.
type portConn struct {
	stream        *connect.BidiStreamForClient[workerpb.DialPortRequest, workerpb.DialPortResponse]
	cancel        context.CancelFunc
	local, remote net.Addr

	rmu       sync.Mutex // one Read at a time
	rest      []byte
	chunks    chan []byte // closed after rerr is set
	rerr      error
	rdeadline deadline

	wmu        sync.Mutex // one Write (or CloseWrite) at a time
	wclosed    bool
	writes     chan *workerpb.DialPortRequest
	sendFailed chan struct{} // closed after werr is set
	werr       error
	wdeadline  deadline

	closeOnce sync.Once
	closed    chan struct{}
	pumps     sync.WaitGroup
}

// receive hands the server's chunks to Read until close_write, the end of
// the call or Close.
func (c *portConn) receive() {
	defer c.pumps.Done()
	c.rerr = c.receiveChunks()
	close(c.chunks)
}

// receiveChunks hands chunks to Read and returns what ends the reading.
func (c *portConn) receiveChunks() error {
	for {
		m, err := c.stream.Receive()
		switch {
		case errors.Is(err, io.EOF):
			return io.EOF // the server ended the call after both ways closed
		case err != nil:
			return fromWire(context.Background(), "port connection", err)
		}
		switch k := m.GetKind().(type) {
		case *workerpb.DialPortResponse_CloseWrite:
			return io.EOF
		case *workerpb.DialPortResponse_Chunk:
			select {
			case c.chunks <- k.Chunk:
			case <-c.closed:
				return net.ErrClosed
			}
		default:
			return protocolError("port connection", "a message that is not a chunk")
		}
	}
}

// send sends Write's messages in order until close_write, a failed send or
// Close.
func (c *portConn) send() {
	defer c.pumps.Done()
	for {
		select {
		case m := <-c.writes:
			if err := c.stream.Send(m); err != nil {
				c.werr = fmt.Errorf("worker port connection: %w: %w", errdefs.ErrUnavailable, err)
				close(c.sendFailed)
				return
			}
			if m.GetCloseWrite() != nil {
				return
			}
		case <-c.closed:
			return
		}
	}
}

func (c *portConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.isClosed() {
		return 0, net.ErrClosed
	}
	for len(c.rest) == 0 {
		if len(p) == 0 {
			return 0, nil
		}
		select {
		case chunk, ok := <-c.chunks:
			if !ok {
				return 0, c.rerr
			}
			c.rest = chunk
		case <-c.rdeadline.passed():
			return 0, os.ErrDeadlineExceeded
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	return n, nil
}

func (c *portConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for n < len(p) {
		chunk := append([]byte(nil), p[n:n+min(len(p)-n, portChunkBytes)]...)
		if err := c.put(&workerpb.DialPortRequest{Kind: &workerpb.DialPortRequest_Chunk{Chunk: chunk}}); err != nil {
			return n, err
		}
		n += len(chunk)
	}
	return n, nil
}

// CloseWrite half-closes the connection: the guest's server reads EOF once
// what was written before has reached it; its replies still arrive.
func (c *portConn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.put(&workerpb.DialPortRequest{Kind: &workerpb.DialPortRequest_CloseWrite{CloseWrite: &workerpb.CloseWrite{}}}); err != nil {
		return err
	}
	c.wclosed = true
	return nil
}

// put hands m to the sender (wmu held).
func (c *portConn) put(m *workerpb.DialPortRequest) error {
	switch {
	case c.isClosed():
		return net.ErrClosed
	case c.wclosed:
		return errdefs.New(errdefs.ErrFailedPrecondition, "port connection: write after CloseWrite")
	}
	select {
	case c.writes <- m:
		return nil
	case <-c.sendFailed:
		return c.werr
	case <-c.wdeadline.passed():
		return os.ErrDeadlineExceeded
	case <-c.closed:
		return net.ErrClosed
	}
}

// Close cuts the stream both ways (the worker closes its connection to the
// guest) and waits for the pumps to stop. Closing the response resets the
// HTTP/2 stream and ends a Receive waiting for data (a cancelled context
// alone does neither once the call is under way); closing the request
// ends a Send waiting for window.
func (c *portConn) Close() error {
	err := net.ErrClosed
	c.closeOnce.Do(func() {
		err = nil
		close(c.closed)
		c.cancel()
		_ = c.stream.CloseResponse()
		_ = c.stream.CloseRequest()
		c.pumps.Wait()
		c.rdeadline.stop()
		c.wdeadline.stop()
	})
	return err
}

func (c *portConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

func (c *portConn) LocalAddr() net.Addr  { return c.local }
func (c *portConn) RemoteAddr() net.Addr { return c.remote }

func (c *portConn) SetDeadline(t time.Time) error {
	c.rdeadline.set(t)
	c.wdeadline.set(t)
	return nil
}

func (c *portConn) SetReadDeadline(t time.Time) error  { c.rdeadline.set(t); return nil }
func (c *portConn) SetWriteDeadline(t time.Time) error { c.wdeadline.set(t); return nil }

// portAddr names an end of a port connection ("sbx_…:port" for the guest).
type portAddr string

func (portAddr) Network() string  { return "space-port" }
func (a portAddr) String() string { return string(a) }

// deadline is a settable point in time whose passing closes a channel.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	ch    chan struct{} // closed once the deadline passed
	done  bool          // ch is closed
}

func (d *deadline) init() { d.ch = make(chan struct{}) }

// set moves the deadline to t (zero: none); a passed one is renewed.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopLocked()
	if d.done {
		d.ch, d.done = make(chan struct{}), false
	}
	if t.IsZero() {
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		d.expireLocked()
		return
	}
	ch := d.ch
	d.timer = time.AfterFunc(wait, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.ch == ch && !d.done {
			d.expireLocked()
		}
	})
}

func (d *deadline) expireLocked() {
	close(d.ch)
	d.done = true
}

func (d *deadline) stopLocked() {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}

func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopLocked()
}

// passed is closed once the deadline has passed.
func (d *deadline) passed() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}
