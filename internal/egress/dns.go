package egress

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/miekg/dns"
)

// serveDNS answers the guest's DNS on one listener until it closes. Only A
// queries for names the policy could allow get addresses, resolved by the
// host's resolver; AAAA and other types for such names get an empty answer,
// every other name NXDOMAIN. Nothing is forwarded, so a query cannot carry
// data anywhere but to this server (and, for allowed names, to the host's
// resolver as an ordinary lookup).
func (sb *sandbox) serveDNS(pc net.PacketConn, l net.Listener) {
	srv := &dns.Server{PacketConn: pc, Listener: l, Handler: dns.HandlerFunc(sb.handleDNS),
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	if err := srv.ActivateAndServe(); err != nil && sb.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
		sb.log.Warn("egress dns", "err", err)
	}
}

func (sb *sandbox) handleDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	defer func() {
		if _, udp := w.LocalAddr().(*net.UDPAddr); udp {
			size := dns.MinMsgSize
			if o := req.IsEdns0(); o != nil {
				size = int(o.UDPSize())
			}
			m.Truncate(size)
		}
		_ = w.WriteMsg(m)
	}()
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		m.Rcode = dns.RcodeRefused
		return
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
		return
	}
	rec.Allowed = true
	if q.Qtype == dns.TypeA {
		ctx, cancel := context.WithTimeout(sb.ctx, 5*time.Second)
		defer cancel()
		addrs, why := sb.resolve(ctx, r, name)
		if addrs == nil {
			rec.Allowed, rec.Rule = false, why
			m.Rcode = dns.RcodeNameError
		}
		ttl := uint32(sb.svc.cfg.DNSTTL / time.Second)
		for _, a := range addrs {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl},
				A:   a.AsSlice(),
			})
		}
	}
	sb.record(rec)
}
