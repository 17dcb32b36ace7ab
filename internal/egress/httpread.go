package egress

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// readLimit passes reads through to r, at most n bytes while n >= 0. It
// sits below the bufio.Reader that reads a connection's headers and then
// its bodies, so a header's bytes can be bounded (and the bound lifted for
// the body) without a second buffer; net/http's server bounds its
// MaxHeaderBytes the same way.
type readLimit struct {
	r   io.Reader
	n   int64 // bytes still allowed; < 0: no limit
	hit bool  // a read was refused at the limit
}

func (l *readLimit) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		l.hit = true
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// header allows the rest of a header of at most max bytes of which
// buffered are already read (none when they are max or more), and clears
// hit.
func (l *readLimit) header(max, buffered int) {
	l.n, l.hit = int64(max-buffered), false
	if l.n < 0 {
		l.n = 0
	}
}

// unlimited lifts the bound, for a body.
func (l *readLimit) unlimited() { l.n, l.hit = -1, false }

// readRequest reads the guest's next request header from br, which reads
// through lim, allowing max bytes for the header (counting what br already
// holds of it). The caller sets the read deadline. It returns the request,
// or a status to answer and the reason (the audit rule) — 431 past max,
// 408 past the deadline, 400 for what does not parse — or none (status 0)
// when the guest closed the connection.
func readRequest(br *bufio.Reader, lim *readLimit, max int) (*http.Request, int, string) {
	lim.header(max, br.Buffered())
	req, err := http.ReadRequest(br)
	hit := lim.hit
	lim.unlimited()
	switch {
	case err == nil:
		return req, 0, ""
	case hit:
		return nil, http.StatusRequestHeaderFieldsTooLarge, "request header too large"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, http.StatusRequestTimeout, "request header timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), isConnError(err):
		return nil, 0, ""
	default:
		return nil, http.StatusBadRequest, "malformed request"
	}
}

// isConnError reports an error of the connection itself (reset, closed),
// as opposed to one of what was read from it.
func isConnError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, net.ErrClosed)
}

// requestName is the host a request names (its Host without a port) and
// that host as a policy name ("" when it is not a domain name).
func requestName(req *http.Request) (host, name string) {
	host = req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return host, normalizeName(host)
}

// hangUpDrain bounds what hangUp reads and drops, in bytes and time.
const (
	hangUpBytes = 1 << 20
	hangUpWait  = 500 * time.Millisecond
)

// hangUp ends a connection just answered with an error while the guest may
// still be sending: a FIN after the answer, then what the guest still
// sends is read and dropped for a moment (bounded), so that the kernel
// does not reset the connection for unread data before the guest has read
// the answer (net/http's server waits the same way).
func hangUp(g net.Conn) {
	closeWrite(g)
	_ = g.SetReadDeadline(time.Now().Add(hangUpWait))
	_, _ = io.CopyN(io.Discard, g, hangUpBytes)
}
