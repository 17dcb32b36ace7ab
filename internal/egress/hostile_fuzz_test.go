package egress

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// The readers of guest bytes on the egress path, fuzzed. None needs a
// namespace (a fuzz worker runs no env: see TestMain). Seeds are in
// testdata/fuzz/<Name>/.

// countReads counts the bytes read through it.
type countReads struct {
	r io.Reader
	n int
}

func (c *countReads) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// FuzzReadRequest: whatever a guest sends as HTTP requests, readRequest
// gives a request or a refusal (400, 431) or none (the guest left), never
// reads more than the header bound for one request's header, and leaves
// the body unbounded; the host a request names is no name or one that
// normalizes to itself.
func FuzzReadRequest(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"))
	f.Add([]byte("POST /x HTTP/1.1\r\nHost: a.test:8080\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\nGET / HTTP/1.1\r\nHost: b.test\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const max, bufSize = 1 << 10, 256
		src := &countReads{r: bytes.NewReader(data)}
		lim := &readLimit{r: src, n: -1}
		br := bufio.NewReaderSize(lim, bufSize)
		for range 4 { // a few pipelined requests
			before, buffered := src.n, br.Buffered()
			req, code, why := readRequest(br, lim, max)
			if lim.n != -1 {
				t.Fatal("the header bound outlived the header")
			}
			if read := src.n - before; read > max-min(buffered, max) {
				t.Fatalf("read %d bytes for a header (%d buffered), bound %d", read, buffered, max)
			}
			if req == nil {
				switch code {
				case 0, http.StatusBadRequest, http.StatusRequestHeaderFieldsTooLarge:
				default:
					t.Fatalf("refused with %d (%s)", code, why)
				}
				if code != 0 && why == "" {
					t.Fatalf("refused with %d and no reason", code)
				}
				return
			}
			if _, name := requestName(req); name != "" && normalizeName(name) != name {
				t.Fatalf("name %q normalizes to %q", name, normalizeName(name))
			}
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				return
			}
		}
	})
}

// FuzzPeekSNI: whatever a guest sends first on a TLS connection, peekSNI
// consumes none of it and reads no more than one ClientHello record (and
// one fill of the buffer) to say what name it holds.
func FuzzPeekSNI(f *testing.F) {
	f.Add([]byte{0x16, 3, 1, 0, 5, 1, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		const chunk = 512
		src := &countReads{r: &chunked{r: bytes.NewReader(data), n: chunk}}
		br := bufio.NewReaderSize(src, 64<<10)
		name, err := peekSNI(br)
		if src.n > 5+maxHelloRecord+chunk {
			t.Fatalf("read %d bytes for one record", src.n)
		}
		rest, _ := io.ReadAll(br)
		if !bytes.Equal(rest, data) {
			t.Fatal("peekSNI consumed the guest's bytes")
		}
		if err == nil && len(name) > 0 {
			_ = normalizeName(name) // must not panic on what a hello names
		}
	})
}

// chunked reads at most n bytes a call, as a socket does.
type chunked struct {
	r io.Reader
	n int
}

func (c *chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// fuzzResolver answers every name with one address, and fails the fuzz
// run for a name the policy does not allow: nothing else may reach the
// host's resolver.
type fuzzResolver struct {
	t     func() *testing.T
	rules *rules
}

func (r *fuzzResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if ok, _ := r.rules.decideName(host); !ok {
		r.t().Errorf("the host resolver was asked for %q, which the policy does not allow", host)
	}
	return []netip.Addr{netip.MustParseAddr("203.0.113.7")}, nil
}

// FuzzDNSQuery: whatever a guest sends as a DNS message, the platform DNS
// answers a query with a reply of the same id that packs (within the
// size it advertised over UDP), FORMERR for what does not parse past a
// header, nothing for a response; only names the policy allows reach the
// host's resolver.
func FuzzDNSQuery(f *testing.F) {
	q := new(dns.Msg)
	q.SetQuestion("allowed.test.", dns.TypeA)
	b, _ := q.Pack()
	f.Add(b, true)
	r, err := compile(wildPolicy)
	if err != nil {
		f.Fatal(err)
	}
	var cur *testing.T
	svc := New(Config{Resolver: &fuzzResolver{t: func() *testing.T { return cur }, rules: r}, LookupRate: 1e9, LookupBurst: 1 << 30})
	sb := &sandbox{id: "fuzz", svc: svc, log: svc.log, audit: newRing(16), ctx: context.Background(),
		lookups: newLookups(svc.cfg), conns: map[*proxyConn]struct{}{}, dnsConns: map[net.Conn]struct{}{}}
	sb.rules.Store(r)
	f.Fuzz(func(t *testing.T, data []byte, udp bool) {
		cur = t
		req, m := parseQuery(data)
		if req == nil {
			if m == nil {
				return
			}
			if m.Rcode != dns.RcodeFormatError || !m.Response {
				t.Fatalf("unparsable query answered %v", m)
			}
			if _, err := packReply(m, nil, udp); err != nil {
				t.Fatalf("FORMERR does not pack: %v", err)
			}
			return
		}
		m = sb.answerDNS(context.Background(), req)
		out, err := packReply(m, req, udp)
		if err != nil {
			t.Fatalf("answer does not pack: %v\n%v", err, m)
		}
		if m.Id != req.Id || !m.Response {
			t.Fatalf("answer id %d response %v to query %d", m.Id, m.Response, req.Id)
		}
		if udp {
			size := dns.MinMsgSize
			if o := req.IsEdns0(); o != nil {
				size = max(int(o.UDPSize()), dns.MinMsgSize)
			}
			if len(out) > size {
				t.Fatalf("UDP answer of %d bytes, the query allows %d", len(out), size)
			}
		}
		for _, rr := range m.Answer {
			if rr.Header().Rrtype != dns.TypeA {
				t.Fatalf("answered %v", rr)
			}
		}
	})
}
