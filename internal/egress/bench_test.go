package egress

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// BenchmarkProxyOverhead compares keep-alive HTTP GETs made directly from
// the host to the upstream with the same GETs made from the guest namespace
// through the sandbox's tap, nftables redirect and egress proxy (policy
// match, platform-resolved upstream, audit record per request). The guest
// path also crosses the test's userspace frame pump that stands in for the
// VM's NIC, so latency-ratio is an upper bound for the proxy's own share.
// The same GETs through the same pump without the proxy (pumpedDirect:
// two namespaces, two taps, no nftables, no proxy) separate the two:
// pump-ratio is what the pump alone costs against direct, proxy-ratio is
// proxied against pumped, the proxy's own share.
func BenchmarkProxyOverhead(b *testing.B) {
	e := newEnv(b, allowAllowed)
	pumped := newPumpedDirect(b, e.id)
	direct := &http.Client{Transport: &http.Transport{}}
	b.Cleanup(direct.CloseIdleConnections)
	guest := e.client()
	run := func(c *http.Client, url string, n int) time.Duration {
		start := time.Now()
		for i := 0; i < n; i++ {
			resp, err := c.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
		return time.Since(start)
	}
	directURL := "http://" + e.addrA.String() + "/"
	run(direct, directURL, 10) // warm connections and DNS
	run(guest, "http://allowed.test/", 10)
	run(pumped.client, pumped.url, 10)
	b.ResetTimer()
	// Interleaved in slices, so that a machine loaded by other work loads
	// all three alike.
	var d, p, q time.Duration
	for left := b.N; left > 0; left -= 50 {
		n := min(left, 50)
		d += run(direct, directURL, n)
		q += run(pumped.client, pumped.url, n)
		p += run(guest, "http://allowed.test/", n)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(n/d.Seconds(), "direct-req/s")
	b.ReportMetric(n/p.Seconds(), "proxied-req/s")
	b.ReportMetric(float64(d.Microseconds())/n, "direct-µs/req")
	b.ReportMetric(float64(p.Microseconds())/n, "proxied-µs/req")
	b.ReportMetric(float64(p-d)/n/1e3, "added-µs/req")
	b.ReportMetric(float64(q.Microseconds())/n, "pumped-µs/req")
	b.ReportMetric(float64(p)/float64(d), "latency-ratio")
	b.ReportMetric(float64(q)/float64(d), "pump-ratio")
	b.ReportMetric(float64(p)/float64(q), "proxy-ratio")
}
