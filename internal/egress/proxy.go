package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// proxyConn is one guest TCP connection being handled.
type proxyConn struct {
	sb    *sandbox
	guest net.Conn
	dst   netip.AddrPort // what the guest dialled (before redirection)

	mu       sync.Mutex
	kind     string // "tcp", "tls", "http"
	name     string // the name the current upstream was chosen for
	upstream net.Conn
	dead     bool

	out, in atomic.Int64
}

func (sb *sandbox) serveProxy() {
	for {
		c, err := sb.ls.Proxy.Accept()
		if err != nil {
			if sb.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				sb.log.Warn("egress accept", "err", err)
			}
			return
		}
		release, ok := sb.svc.conns.TryAcquire(sb.id)
		if !ok {
			sb.record(Record{Kind: "tcp", Destination: c.LocalAddr().String(), Rule: "connection limit"})
			c.Close()
			continue
		}
		pc := &proxyConn{sb: sb, guest: c}
		sb.mu.Lock()
		sb.conns[pc] = struct{}{}
		sb.mu.Unlock()
		sb.wg.Add(1)
		go func() {
			defer sb.wg.Done()
			defer func() {
				pc.kill()
				sb.mu.Lock()
				delete(sb.conns, pc)
				sb.mu.Unlock()
				release()
			}()
			pc.handle()
		}()
	}
}

// kill closes both sides; handlers then unwind.
func (c *proxyConn) kill() {
	c.mu.Lock()
	c.dead = true
	up := c.upstream
	c.mu.Unlock()
	c.guest.Close()
	if up != nil {
		up.Close()
	}
}

func (c *proxyConn) setUpstream(kind, name string, up net.Conn) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		up.Close()
		return net.ErrClosed
	}
	if c.upstream != nil && c.upstream != up {
		c.upstream.Close()
	}
	c.kind, c.name, c.upstream = kind, name, up
	return nil
}

// stillAllowed re-judges an open connection under new rules.
func (c *proxyConn) stillAllowed(r *rules) bool {
	c.mu.Lock()
	kind, name := c.kind, c.name
	c.mu.Unlock()
	switch kind {
	case "":
		return true // still being classified; it will read the new rules
	case "tcp":
		ok, _ := r.decideAddr(c.dst.Addr())
		return ok
	default:
		ok, _ := r.decideName(name)
		return ok
	}
}

func (c *proxyConn) handle() {
	sb := c.sb
	tc, ok := c.guest.(*net.TCPConn)
	if !ok {
		return
	}
	dst, err := originalDst(tc)
	if err != nil {
		sb.log.Warn("egress: no original destination", "err", err)
		return
	}
	c.dst = dst
	r := sb.rules.Load()

	// An explicit CIDR allow carries any TCP, server-speaks-first included.
	if ok, rule := r.decideAddr(dst.Addr()); ok && rule != "default allow" {
		c.forwardRaw(dst, rule)
		return
	}
	lim := &readLimit{r: c.guest, n: -1}
	br := bufio.NewReaderSize(lim, 64<<10)
	_ = c.guest.SetReadDeadline(time.Now().Add(sb.svc.cfg.PeekTimeout))
	first, err := br.Peek(1)
	if err != nil {
		sb.record(Record{Kind: "tcp", Destination: dst.String(), Rule: "no data from guest"})
		return
	}
	if first[0] == 0x16 { // TLS handshake record
		name, err := peekSNI(br)
		_ = c.guest.SetReadDeadline(time.Time{})
		if err != nil || normalizeName(name) == "" {
			c.byAddress(dst, "tls", br)
			return
		}
		name = normalizeName(name)
		note := ""
		if len(r.injectionsFor(name)) > 0 {
			if sb.svc.cfg.CA != nil {
				c.intercept(name, br)
				return
			}
			note = " (TLS passed through: inject rules apply to plain HTTP only)"
		}
		c.forwardNamed("tls", name, dst.Port(), br, note)
		return
	}
	if looksLikeHTTP(br) {
		c.serveHTTP(c.guest, br, lim, false)
		return
	}
	_ = c.guest.SetReadDeadline(time.Time{})
	c.byAddress(dst, "tcp", br)
}

// byAddress handles a connection that named no host: only default allow
// lets it through (explicit CIDRs were handled before peeking).
func (c *proxyConn) byAddress(dst netip.AddrPort, kind string, br *bufio.Reader) {
	r := c.sb.rules.Load()
	ok, rule := r.decideAddr(dst.Addr())
	if !ok {
		c.sb.record(Record{Kind: kind, Destination: dst.String(), Rule: rule})
		return
	}
	c.forwardRawBuffered(dst, rule, br)
}

func (c *proxyConn) forwardRaw(dst netip.AddrPort, rule string) {
	c.forwardRawBuffered(dst, rule, c.guest)
}

func (c *proxyConn) forwardRawBuffered(dst netip.AddrPort, rule string, from io.Reader) {
	rec := Record{Kind: "tcp", Destination: dst.String(), Rule: rule}
	if why := c.sb.svc.guard.refuse(dst.Addr()); why != "" {
		rec.Rule = why
		c.sb.record(rec)
		return
	}
	up, err := c.sb.svc.cfg.Dial(c.sb.ctx, "tcp4", dst.String())
	if err != nil {
		rec.Rule, rec.Allowed = rule+" (upstream unreachable)", true
		c.sb.record(rec)
		return
	}
	if c.setUpstream("tcp", "", up) != nil {
		return
	}
	rec.Allowed, rec.Upstream = true, dst.String()
	p := c.sb.record(rec)
	c.splice(from, up, up)
	c.sb.audit.update(p, c.out.Load(), c.in.Load())
}

// forwardNamed connects a TLS connection to the address the platform
// resolves for name, whatever address the guest dialled.
// note is appended to the audit rule of an allowed connection.
func (c *proxyConn) forwardNamed(kind, name string, port uint16, br *bufio.Reader, note string) {
	r := c.sb.rules.Load()
	rec := Record{Kind: kind, Destination: net.JoinHostPort(name, strconv.Itoa(int(port)))}
	ok, rule := r.decideName(name)
	rec.Rule = rule
	if ok {
		rec.Rule += note
	}
	if !ok {
		c.sb.record(rec)
		return
	}
	up, addr, why := c.sb.dialName(c.sb.ctx, r, name, port)
	if up == nil {
		rec.Rule = why
		c.sb.record(rec)
		return
	}
	if c.setUpstream(kind, name, up) != nil {
		return
	}
	rec.Allowed, rec.Upstream = true, addr
	p := c.sb.record(rec)
	c.splice(br, up, up)
	c.sb.audit.update(p, c.out.Load(), c.in.Load())
}

// resolve returns the addresses the platform would connect to for name:
// IPv4, allowed by the guard, not in a denied CIDR. With none, it says
// why (the last refusal's reason).
func (sb *sandbox) resolve(ctx context.Context, r *rules, name string) ([]netip.Addr, string) {
	addrs, _, err := sb.lookup(ctx, name)
	if err != nil {
		return nil, err.Error()
	}
	return sb.usable(r, addrs)
}

// usable are those of addrs the platform would connect to, or none and
// the audit rule why.
func (sb *sandbox) usable(r *rules, addrs []netip.Addr) ([]netip.Addr, string) {
	var ok []netip.Addr
	why := whyForbidden
	for _, a := range addrs {
		a = a.Unmap()
		if w := sb.svc.guard.refuse(a); w != "" {
			why = w
			continue
		}
		if d, rule := r.deniedAddr(a); d {
			why = rule
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		return nil, why
	}
	return ok, ""
}

func (sb *sandbox) dialName(ctx context.Context, r *rules, name string, port uint16) (net.Conn, string, string) {
	addrs, why := sb.resolve(ctx, r, name)
	if addrs == nil {
		return nil, "", why
	}
	for _, a := range addrs {
		addr := netip.AddrPortFrom(a, port).String()
		up, err := sb.svc.cfg.Dial(ctx, "tcp4", addr)
		if err == nil {
			return up, addr, ""
		}
	}
	return nil, "", "upstream unreachable"
}

// splice copies both ways until either side is done, counting bytes.
func (c *proxyConn) splice(from io.Reader, to io.Writer, up net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		n, _ := io.Copy(c.guest, up)
		c.in.Add(n)
		closeWrite(c.guest)
	}()
	n, _ := io.Copy(to, from)
	c.out.Add(n)
	closeWrite(up)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}

// originalDst is where the guest meant to connect before the namespace's
// redirect rule; the conntrack entry lives in the sandbox namespace, which
// is where the accepted socket is.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		b := m.Multiaddr
		ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), uint16(b[2])<<8|uint16(b[3]))
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST: %w", errors.Join(errdefs.ErrInternal, err))
	}
	return ap, nil
}

var errGotHello = errors.New("client hello read")

// maxHelloRecord is the largest TLS record a ClientHello may come in: a
// plaintext record holds at most 2^14 bytes (RFC 8446, 5.1).
const maxHelloRecord = 1 << 14

var errHelloRecord = errors.New("TLS record too long for a client hello")

// peekSNI reads the server name from a ClientHello sitting in br without
// consuming it, by running the standard library's handshake parser over a
// copy of the first record and stopping right after the hello. It reads
// at most one record (maxHelloRecord); the caller's read deadline bounds
// the wait.
func peekSNI(br *bufio.Reader) (string, error) {
	hdr, err := br.Peek(5)
	if err != nil {
		return "", err
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	if n > maxHelloRecord {
		return "", errHelloRecord
	}
	rec, err := br.Peek(5 + n)
	if err != nil {
		return "", err
	}
	var name string
	srv := tls.Server(&replayConn{r: bytes.NewReader(rec)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name = h.ServerName
			return nil, errGotHello
		},
	})
	if err := srv.Handshake(); !errors.Is(err, errGotHello) {
		return "", fmt.Errorf("parse client hello: %w", err)
	}
	return name, nil
}

// replayConn feeds recorded bytes to a parser and swallows its writes.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *replayConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }
func (c *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }

func looksLikeHTTP(br *bufio.Reader) bool {
	b, _ := br.Peek(8)
	for _, m := range []string{"GET ", "POST ", "PUT ", "HEAD ", "DELETE ", "PATCH ", "OPTIONS ", "TRACE "} {
		if bytes.HasPrefix(b, []byte(m)) || bytes.HasPrefix([]byte(m), b) && len(b) > 0 && len(b) < len(m) {
			return true
		}
	}
	return false
}
