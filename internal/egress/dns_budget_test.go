package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/space-sandbox/space/internal/budget"
	"github.com/space-sandbox/space/internal/testenv"
)

// countingResolver answers allowed.test and every name under wild.test
// with one address, and makes every name under slow.test wait until its
// context ends or release is closed. It counts the lookups it was asked
// for and the most it held at once.
type countingResolver struct {
	release chan struct{}

	mu      sync.Mutex
	calls   map[string]int
	total   int
	now     int
	maxHeld int
}

func newCountingResolver() *countingResolver {
	return &countingResolver{release: make(chan struct{}), calls: map[string]int{}}
}

func (r *countingResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	r.calls[host]++
	r.total++
	r.now++
	r.maxHeld = max(r.maxHeld, r.now)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.now--
		r.mu.Unlock()
	}()
	switch {
	case strings.HasSuffix(host, ".slow.test"):
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.release:
		}
		return []netip.Addr{netip.MustParseAddr("203.0.113.9")}, nil
	case host == "allowed.test", strings.HasSuffix(host, ".wild.test"):
		return []netip.Addr{netip.MustParseAddr("203.0.113.7")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *countingResolver) stats(host string) (calls, total, maxHeld int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[host], r.total, r.maxHeld
}

var wildPolicy = Policy{Egress: Egress{Allow: []string{"allowed.test", "*.wild.test", "*.slow.test"}}}

// loopSandbox attaches sandbox id to svc with its DNS listeners on
// loopback (the proxy listener is never dialled) and returns their
// addresses: the DNS path needs no namespace.
func loopSandbox(t *testing.T, svc *Service, id string, p Policy) (udp, tcp string) {
	t.Helper()
	pl, err := net.Listen("tcp4", "127.0.0.1:0")
	must(t, err)
	tl, err := net.Listen("tcp4", "127.0.0.1:0")
	must(t, err)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	must(t, err)
	must(t, svc.Attach(context.Background(), id, Listeners{Proxy: pl, DNSTCP: tl, DNSUDP: pc}, p, nil))
	t.Cleanup(func() { svc.Detach(context.Background(), id) })
	return pc.LocalAddr().String(), tl.Addr().String()
}

func queryBytes(t testing.TB, id uint16, name string) []byte {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Id = id
	b, err := m.Pack()
	must(t, err)
	return b
}

// exchange asks one A query over UDP and waits (bounded) for its answer.
func exchange(t *testing.T, addr, name string) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	resp, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	return resp
}

// budgetMetrics are budget metrics on a registry of the test's own.
type budgetMetrics struct {
	reg *prometheus.Registry
	*budget.Metrics
}

func newBudgetMetrics() budgetMetrics {
	reg := prometheus.NewRegistry()
	return budgetMetrics{reg: reg, Metrics: budget.NewMetrics(reg)}
}

// exhausted is space_guest_budget_exhausted_total{budget=kind}.
func (m budgetMetrics) exhausted(t testing.TB, kind budget.Kind) float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "space_guest_budget_exhausted_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "budget" && l.GetValue() == string(kind) {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestDNSFloodRefusedCalmSandboxAnswers: a guest flooding UDP queries for
// names whose lookups hang fills its budget of queries in flight; every
// query past it is REFUSED at once and counted, the host's resolver sees
// no more than the budget at once, and another sandbox on the same
// Service is answered meanwhile.
func TestDNSFloodRefusedCalmSandboxAnswers(t *testing.T) {
	res := newCountingResolver()
	t.Cleanup(func() { close(res.release) })
	m := newBudgetMetrics()
	const inFlight, flood = 4, 100 // well within loopback's socket buffers
	svc := New(Config{Resolver: res, DNSQueries: inFlight, Budgets: m.Metrics, LookupTimeout: time.Minute,
		LookupRate: 1e6, LookupBurst: 1e6})
	floodUDP, _ := loopSandbox(t, svc, "flood", wildPolicy)
	calmUDP, _ := loopSandbox(t, svc, "calm", wildPolicy)

	c, err := net.Dial("udp4", floodUDP)
	must(t, err)
	defer c.Close()
	queries := make([][]byte, flood)
	for i := range queries {
		queries[i] = queryBytes(t, uint16(i), fmt.Sprintf("n%d.slow.test.", i))
	}
	go func() { // while the answers are read
		for _, q := range queries {
			if _, err := c.Write(q); err != nil {
				return
			}
		}
	}()
	refused := 0
	buf := make([]byte, 1500)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for refused < flood-inFlight {
		n, err := c.Read(buf)
		if err != nil {
			break // the deadline: a hang guard, not a measure
		}
		var r dns.Msg
		if r.Unpack(buf[:n]) == nil && r.Rcode == dns.RcodeRefused {
			refused++
		}
	}
	if refused != flood-inFlight {
		t.Errorf("flood of %d queries with %d in flight: %d refused, want %d", flood, inFlight, refused, flood-inFlight)
	}
	if got := m.exhausted(t, budgetDNSQueries); got < float64(flood-inFlight) {
		t.Errorf("space_guest_budget_exhausted_total{budget=%q} = %v, want >= %d", budgetDNSQueries, got, flood-inFlight)
	}
	if _, _, held := res.stats(""); held > inFlight {
		t.Errorf("the host resolver held %d lookups at once, want <= %d", held, inFlight)
	}

	resp := exchange(t, calmUDP, "allowed.test.")
	if resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
		t.Fatalf("calm sandbox during the flood: %v", resp)
	}
	// The slot is given back just after the answer is written, so the
	// test may read the answer first.
	testenv.Eventually(t, 5*time.Second, func() error {
		if got := svc.dnsQueries.InUse("calm"); got != 0 {
			return fmt.Errorf("calm sandbox holds %d query slots after its answer", got)
		}
		return nil
	})
}

// TestDNSLookupRateAndCache: repeats of one name are answered from the
// sandbox's cache (one lookup), and random names under an allowed
// wildcard reach the host's resolver no faster than the sandbox's lookup
// rate; past it they are REFUSED and counted.
func TestDNSLookupRateAndCache(t *testing.T) {
	res := newCountingResolver()
	t.Cleanup(func() { close(res.release) })
	m := newBudgetMetrics()
	const burst, perSec = 5, 1.0
	svc := New(Config{Resolver: res, Budgets: m.Metrics, LookupRate: perSec, LookupBurst: burst, DNSTTL: time.Minute})
	udp, _ := loopSandbox(t, svc, "sb", wildPolicy)

	for range 20 {
		if r := exchange(t, udp, "allowed.test."); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("allowed.test: %v", r)
		}
	}
	if calls, _, _ := res.stats("allowed.test"); calls != 1 {
		t.Errorf("20 queries for one name made %d lookups, want 1 (cached)", calls)
	}

	start := time.Now()
	refused := 0
	const names = 40
	for i := range names {
		r := exchange(t, udp, fmt.Sprintf("r%d.wild.test.", i))
		if r.Rcode == dns.RcodeRefused {
			refused++
		}
	}
	_, total, _ := res.stats("")
	// What the rate allows over the time the queries took (the cached
	// allowed.test took one token too).
	allowed := burst + int(perSec*time.Since(start).Seconds()) + 1
	if total > allowed {
		t.Errorf("%d random names made %d lookups; the rate allows %d", names, total, allowed)
	}
	if refused == 0 || float64(refused) != m.exhausted(t, budgetLookupRate) {
		t.Errorf("refused %d, counted %v; want some refused, each counted", refused, m.exhausted(t, budgetLookupRate))
	}
}

// TestDNSTCPConnectionBudget: a sandbox's DNS-over-TCP connections are
// bounded; one past the budget is closed at once, the others still answer.
func TestDNSTCPConnectionBudget(t *testing.T) {
	res := newCountingResolver()
	t.Cleanup(func() { close(res.release) })
	m := newBudgetMetrics()
	const limit = 2
	svc := New(Config{Resolver: res, Budgets: m.Metrics, DNSTCPConns: limit})
	_, tcp := loopSandbox(t, svc, "sb", wildPolicy)

	query := func(c net.Conn) (*dns.Msg, error) {
		dc := &dns.Conn{Conn: c}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		q := new(dns.Msg)
		q.SetQuestion("allowed.test.", dns.TypeA)
		if err := dc.WriteMsg(q); err != nil {
			return nil, err
		}
		return dc.ReadMsg()
	}
	// Each within the budget answered: each holds its slot from then on.
	var conns []net.Conn
	for i := range limit {
		c, err := net.Dial("tcp4", tcp)
		must(t, err)
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
		if r, err := query(c); err != nil || r.Rcode != dns.RcodeSuccess {
			t.Fatalf("connection %d within the budget: %v %v", i, r, err)
		}
	}
	extra, err := net.Dial("tcp4", tcp)
	must(t, err)
	defer extra.Close()
	if r, err := query(extra); err == nil {
		t.Errorf("connection past the budget answered: %v", r)
	}
	if got := m.exhausted(t, budgetDNSTCP); got != 1 {
		t.Errorf("exhausted{%s} = %v, want 1", budgetDNSTCP, got)
	}
	for i, c := range conns {
		if r, err := query(c); err != nil || r.Rcode != dns.RcodeSuccess {
			t.Errorf("connection %d within the budget, again: %v %v", i, r, err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := svc.dnsTCP.InUse("sb"); n != 0 {
			return fmt.Errorf("%d DNS TCP slots still held after the guest closed", n)
		}
		return nil
	})
}
