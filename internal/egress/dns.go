package egress

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/miekg/dns"
)

// What one DNS-over-TCP connection may take (miekg/dns's own server allows
// 8 s idle and 128 queries): each query must arrive whole within
// dnsTCPIdle of the last answer, and each answer be taken within
// dnsWriteTimeout.
const (
	dnsTCPIdle      = 10 * time.Second
	dnsTCPQueries   = 128
	dnsWriteTimeout = 5 * time.Second
)

// The guest's DNS is served here rather than by miekg/dns's Server, which
// starts a goroutine per UDP packet and per TCP connection with no bound:
// a query takes one of the sandbox's dns_queries slots before it gets a
// goroutine (past the budget it is refused at once, in the reading loop),
// and a TCP connection one of its dns_tcp_connections slots. miekg/dns
// still parses, frames and packs every message.

// serveDNSUDP answers the guest's DNS over UDP until pc closes.
func (sb *sandbox) serveDNSUDP(pc net.PacketConn) {
	buf := make([]byte, dns.MaxMsgSize)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if sb.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				sb.log.Warn("egress dns", "err", err)
			}
			return
		}
		// Parsed before buf is read into again; the message holds copies.
		req, reply := parseQuery(buf[:n])
		if req == nil {
			if reply != nil {
				sb.writeDNS(pc, from, reply, nil)
			}
			continue
		}
		release, ok := sb.svc.dnsQueries.TryAcquire(sb.id)
		if !ok {
			sb.writeDNS(pc, from, sb.refuseDNS(req), req)
			continue
		}
		sb.wg.Add(1)
		go func() {
			defer sb.wg.Done()
			defer release()
			sb.writeDNS(pc, from, sb.answerDNS(sb.ctx, req), req)
		}()
	}
}

// writeDNS sends m over UDP, truncated to what req said it can take.
func (sb *sandbox) writeDNS(pc net.PacketConn, to net.Addr, m, req *dns.Msg) {
	b, err := packReply(m, req, true)
	if err != nil {
		return
	}
	_, _ = pc.WriteTo(b, to)
}

// serveDNSTCP answers the guest's DNS over TCP until l closes.
func (sb *sandbox) serveDNSTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			if sb.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				sb.log.Warn("egress dns accept", "err", err)
			}
			return
		}
		release, ok := sb.svc.dnsTCP.TryAcquire(sb.id)
		if !ok {
			sb.record(Record{Kind: "dns", Destination: "tcp " + c.LocalAddr().String(), Rule: "DNS connection limit"})
			c.Close()
			continue
		}
		// Detach cancels the context before it closes what is in
		// dnsConns: a connection added after that is closed here.
		sb.mu.Lock()
		if sb.ctx.Err() != nil {
			sb.mu.Unlock()
			c.Close()
			release()
			continue
		}
		sb.dnsConns[c] = struct{}{}
		sb.mu.Unlock()
		sb.wg.Add(1)
		go func() {
			defer sb.wg.Done()
			sb.serveDNSConn(c)
			c.Close()
			sb.mu.Lock()
			delete(sb.dnsConns, c)
			sb.mu.Unlock()
			release()
		}()
	}
}

// serveDNSConn answers the queries of one TCP connection, one at a time.
func (sb *sandbox) serveDNSConn(c net.Conn) {
	dc := &dns.Conn{Conn: c}
	buf := make([]byte, dns.MaxMsgSize)
	for range dnsTCPQueries {
		_ = c.SetReadDeadline(time.Now().Add(dnsTCPIdle))
		n, err := dc.Read(buf)
		if err != nil {
			return
		}
		req, m := parseQuery(buf[:n])
		switch {
		case req == nil && m == nil:
			return
		case req != nil:
			if release, ok := sb.svc.dnsQueries.TryAcquire(sb.id); ok {
				m = sb.answerDNS(sb.ctx, req)
				release()
			} else {
				m = sb.refuseDNS(req)
			}
		}
		b, err := packReply(m, req, false)
		if err != nil {
			return
		}
		_ = c.SetWriteDeadline(time.Now().Add(dnsWriteTimeout))
		if _, err := dc.Write(b); err != nil {
			return
		}
	}
}

// parseQuery unpacks one message from the guest. It returns the query, or
// nil and what to answer instead: FORMERR for what does not parse past its
// header (as miekg/dns's server answers), nothing for a response or what
// has no header.
func parseQuery(b []byte) (*dns.Msg, *dns.Msg) {
	req := new(dns.Msg)
	if err := req.Unpack(b); err != nil {
		if len(b) < 12 || req.Response {
			return nil, nil
		}
		return nil, new(dns.Msg).SetRcodeFormatError(req)
	}
	if req.Response {
		return nil, nil
	}
	return req, nil
}

// packReply packs m, truncated for UDP to the size req advertises (512
// bytes without EDNS0).
func packReply(m, req *dns.Msg, udp bool) ([]byte, error) {
	if udp && req != nil {
		size := dns.MinMsgSize
		if o := req.IsEdns0(); o != nil {
			size = int(o.UDPSize())
		}
		m.Truncate(size)
	}
	return m.Pack()
}

// refuseDNS is the answer to a query past the sandbox's budget of queries
// in flight.
func (sb *sandbox) refuseDNS(req *dns.Msg) *dns.Msg {
	rec := Record{Kind: "dns", Rule: "too many DNS queries in flight"}
	if len(req.Question) > 0 {
		rec.Destination = req.Question[0].Name + " " + dns.TypeToString[req.Question[0].Qtype]
	}
	sb.record(rec)
	return new(dns.Msg).SetRcode(req, dns.RcodeRefused)
}

// answerDNS is the answer to one of the guest's queries. Only A queries for
// names the policy could allow get addresses, resolved by the host's
// resolver (through the sandbox's cache and lookup rate); AAAA and other
// types for such names get an empty answer, every other name NXDOMAIN.
// Nothing is forwarded, so a query cannot carry data anywhere but to this
// server (and, for allowed names, to the host's resolver as an ordinary
// lookup). A lookup past the sandbox's rate is REFUSED, one the resolver
// failed (or took too long for) SERVFAIL.
func (sb *sandbox) answerDNS(ctx context.Context, req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		m.Rcode = dns.RcodeRefused
		return m
	}
	q := req.Question[0]
	name := normalizeName(q.Name)
	r := sb.rules.Load()
	rec := Record{Kind: "dns", Destination: q.Name + " " + dns.TypeToString[q.Qtype]}
	ok, rule := false, "not a domain name"
	if name != "" && q.Qclass == dns.ClassINET {
		ok, rule = r.decideName(name)
	}
	rec.Rule = rule
	if !ok {
		m.Rcode = dns.RcodeNameError
		sb.record(rec)
		return m
	}
	rec.Allowed = true
	if q.Qtype == dns.TypeA {
		addrs, ttl, err := sb.lookup(ctx, name)
		why := ""
		if err == nil {
			addrs, why = sb.usable(r, addrs)
		} else {
			addrs, why = nil, err.Error()
		}
		switch {
		case errors.Is(err, errLookupRate):
			m.Rcode = dns.RcodeRefused
		case errors.Is(err, errLookupFailed):
			m.Rcode = dns.RcodeServerFailure
		case addrs == nil:
			m.Rcode = dns.RcodeNameError
		}
		if addrs == nil {
			rec.Allowed, rec.Rule = false, why
		}
		// What the cache still holds the answer for, rounded up: a guest
		// never keeps it longer than the platform does.
		secs := uint32((ttl + time.Second - 1) / time.Second)
		for _, a := range addrs {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: secs},
				A:   a.AsSlice(),
			})
		}
	}
	sb.record(rec)
	return m
}
