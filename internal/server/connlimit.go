package server

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
)

// DefaultMaxConnsPerClient bounds the connections one client (remote IP)
// holds open at once. It is well above what an SDK's connection pool and a
// few event streams need, and keeps a client that opens connections and
// never finishes its requests from taking the process's file descriptors.
const DefaultMaxConnsPerClient = 128

// limitPerClient wraps ln so that each remote IP holds at most max open
// connections; one beyond that is closed as soon as it is accepted. max <= 0
// means no bound.
func limitPerClient(ln net.Listener, max int, log *slog.Logger) net.Listener {
	if max <= 0 {
		return ln
	}
	return &clientLimitListener{Listener: ln, max: max, log: log, open: map[netip.Addr]int{}}
}

type clientLimitListener struct {
	net.Listener
	max int
	log *slog.Logger

	mu   sync.Mutex
	open map[netip.Addr]int
}

func (l *clientLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		l.mu.Lock()
		n := l.open[ip]
		if n >= l.max {
			l.mu.Unlock()
			c.Close()
			l.log.Debug("connection refused: too many from this client", "remote", ip.String(), "max", l.max)
			continue
		}
		l.open[ip] = n + 1
		l.mu.Unlock()
		return &countedConn{Conn: c, release: sync.OnceFunc(func() { l.release(ip) })}, nil
	}
}

func (l *clientLimitListener) release(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
}

// remoteIP is c's remote IP (IPv4-mapped IPv6 as IPv4); the zero Addr for
// a connection that is not TCP, so those share one bound.
func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// countedConn gives its slot back when it closes (net/http closes every
// connection it serves, and a handler that hijacks one closes it too).
type countedConn struct {
	net.Conn
	release func()
}

func (c *countedConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// CloseWrite keeps net/http's graceful half-close of TCP connections.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
