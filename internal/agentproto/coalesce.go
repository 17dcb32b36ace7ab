package agentproto

import (
	"encoding/binary"
	"net"
)

// yamux writes each data frame as two writes on its connection: the
// 12-byte header, then the body. On the agent's virtio-serial port every
// write is a virtqueue buffer and a notification of the host (under TCG an
// exit into QEMU's device model), and on the host a separate socket write;
// frameConn joins each data header with its body into one write.
//
// The header layout is yamux's (version, type, flags, stream id, length);
// a data frame (type 0) with a non-zero length is followed by exactly that
// many body bytes, written by the same goroutine (yamux's send loop).
type frameConn struct {
	net.Conn
	buf  []byte // a held data header, then its body as it arrives
	want int    // body bytes still expected after the held header
}

const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
)

func newFrameConn(c net.Conn) *frameConn { return &frameConn{Conn: c} }

// Write implements net.Conn. It is not safe for concurrent use, which
// yamux never asks of it: one send loop writes.
func (c *frameConn) Write(p []byte) (int, error) {
	if c.want == 0 {
		if len(p) == yamuxHeaderSize && p[0] == 0 && p[1] == yamuxTypeData {
			if n := binary.BigEndian.Uint32(p[8:12]); n > 0 && n <= maxHeldBody {
				c.buf = append(c.buf[:0], p...)
				c.want = int(n)
				return len(p), nil
			}
		}
		return c.Conn.Write(p)
	}
	// The body of the held header (all of it, as yamux writes it).
	take := min(len(p), c.want)
	c.buf = append(c.buf, p[:take]...)
	c.want -= take
	if c.want > 0 {
		return len(p), nil
	}
	_, err := c.Conn.Write(c.buf)
	if cap(c.buf) > maxKeptBuf {
		c.buf = nil
	}
	if err != nil {
		return 0, err
	}
	if take < len(p) { // more than the frame's body: never from yamux
		if _, err := c.Conn.Write(p[take:]); err != nil {
			return take, err
		}
	}
	return len(p), nil
}

// maxHeldBody bounds the body frameConn gathers in memory: larger frames
// (a window larger than this) go out in two writes as before.
const maxHeldBody = 4 << 20

// maxKeptBuf is the largest buffer frameConn keeps between frames.
const maxKeptBuf = 1 << 20
