package agentproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The link's bounds on what a peer may make the other side hold. A guest is
// root in its VM and may replace the agent, so the host reads the link as an
// attacker's bytes: yamux v0.1.2 answers every ping in a goroutine of its
// own that waits for the send loop, and its send loop writes without a
// deadline, so a guest that floods pings and never reads made ~370,000
// goroutines and 1.2 GiB in 2 s over a socket pair. guardConn sits under
// yamux and drops the session instead.
const (
	// PingRate and PingBurst bound the pings a peer may send: each side
	// pings once per KeepAliveInterval, so a peer past them is not ours.
	// A burst of pings costs at most PingBurst+1 goroutines of yamux's,
	// each waiting at most WriteTimeout.
	PingRate  = 1 // per second
	PingBurst = 16

	// WriteTimeout bounds one write on the link: a peer that has not
	// taken any of the bytes the send loop writes within it is not
	// reading, and the session is dropped. It is yamux's own
	// ConnectionWriteTimeout, which already fails calls after it.
	WriteTimeout = 10 * time.Second

	// KeepAliveInterval is how often each side pings the other.
	KeepAliveInterval = 10 * time.Second
)

// ErrLinkAbuse is the class of a session dropped because the peer broke
// one of the link's bounds (guardConn's errors wrap it).
var ErrLinkAbuse = errors.New("agent link abuse")

// yamux frame types and flags (its spec.md).
const (
	yamuxTypeWindowUpdate = 1
	yamuxTypePing         = 2
	yamuxFlagSYN          = 1
)

// guardConn checks the frames a peer sends before yamux reads them (it
// follows yamux's framing: a 12-byte header, and after a data frame's
// header that many body bytes) and sets a write deadline on every write of
// yamux's send loop. A read that meets a frame past the bounds fails, and
// yamux ends the session with that error.
type guardConn struct {
	net.Conn
	acceptStreams bool // false on the host: the agent never opens streams
	pings         *rate.Limiter
	writeTimeout  time.Duration
	onAbuse       func(error)

	// Read side, used by yamux's one reader.
	hdr  [yamuxHeaderSize]byte
	hdrN int    // header bytes gathered
	skip uint32 // body bytes of a data frame still to pass
	err  error  // once set, every read fails with it

	// Write side, used by yamux's one send loop.
	wmu      sync.Mutex
	deadline time.Time
	closed   bool // no write extends the deadline once yamux closed the conn
}

func newGuardConn(c net.Conn, acceptStreams bool, writeTimeout time.Duration, onAbuse func(error)) *guardConn {
	return &guardConn{
		Conn:          c,
		acceptStreams: acceptStreams,
		pings:         rate.NewLimiter(PingRate, PingBurst),
		writeTimeout:  writeTimeout,
		onAbuse:       onAbuse,
	}
}

// Read implements net.Conn.
func (g *guardConn) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.Conn.Read(p)
	if cerr := g.check(p[:n]); cerr != nil {
		g.err = cerr
		if g.onAbuse != nil {
			g.onAbuse(cerr)
		}
		// The bytes before the offending frame are dropped too: the
		// session ends with this read.
		return 0, cerr
	}
	return n, err
}

// check walks the frames in b, carrying a header or body split across
// reads to the next call.
func (g *guardConn) check(b []byte) error {
	for len(b) > 0 {
		if g.skip > 0 {
			k := min(uint32(len(b)), g.skip)
			g.skip -= k
			b = b[k:]
			continue
		}
		k := copy(g.hdr[g.hdrN:], b)
		g.hdrN += k
		b = b[k:]
		if g.hdrN < yamuxHeaderSize {
			return nil
		}
		g.hdrN = 0
		if err := g.frame(g.hdr[:]); err != nil {
			return err
		}
	}
	return nil
}

// frame checks one frame header.
func (g *guardConn) frame(h []byte) error {
	typ := h[1]
	flags := binary.BigEndian.Uint16(h[2:4])
	length := binary.BigEndian.Uint32(h[8:12])
	switch {
	case h[0] != 0:
		// Not yamux's version: yamux itself fails the session on it.
		return nil
	case (typ == yamuxTypeData || typ == yamuxTypeWindowUpdate) && flags&yamuxFlagSYN != 0 && !g.acceptStreams:
		return fmt.Errorf("%w: the peer opened a stream, which it never may", ErrLinkAbuse)
	case typ == yamuxTypePing && flags&yamuxFlagSYN != 0 && !g.pings.Allow():
		return fmt.Errorf("%w: more than %d pings at once (%d a second allowed)", ErrLinkAbuse, PingBurst, PingRate)
	}
	if typ == yamuxTypeData {
		g.skip = length
	}
	return nil
}

// Write implements net.Conn. Extending the deadline only once half of it
// has passed keeps the timer update off most writes.
func (g *guardConn) Write(p []byte) (int, error) {
	g.wmu.Lock()
	if g.closed {
		g.wmu.Unlock()
		return 0, net.ErrClosed
	}
	now := time.Now()
	if now.Add(g.writeTimeout / 2).After(g.deadline) {
		g.deadline = now.Add(g.writeTimeout)
		if err := g.Conn.SetWriteDeadline(g.deadline); err != nil {
			g.wmu.Unlock()
			return 0, err
		}
	}
	g.wmu.Unlock()
	return g.Conn.Write(p)
}

// Close implements net.Conn. After it no write runs: the agent's conn
// "closes" by expiring its deadlines (the next session syncs on the same
// stream), and a write that extended the deadline would undo that.
func (g *guardConn) Close() error {
	g.wmu.Lock()
	g.closed = true
	g.wmu.Unlock()
	return g.Conn.Close()
}
