package egress

import (
	"crypto/tls"
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
	benchOverhead(b, direct, "http://"+e.addrA.String()+"/", pumped.client, pumped.url, e.client(), "http://allowed.test/")
}

// BenchmarkProxyOverheadTCP is BenchmarkProxyOverhead for plain TCP: the
// policy allows upstream A's address by CIDR, so the proxy judges the
// connection once and then copies bytes both ways (splice), whatever they
// carry; the GETs are the same keep-alive GETs.
func BenchmarkProxyOverheadTCP(b *testing.B) {
	e := newEnv(b, Policy{Egress: Egress{Allow: []string{"198.18.0.0/15"}}}) // every env's upstreams
	pumped := newPumpedDirect(b, e.id)
	direct := &http.Client{Transport: &http.Transport{}}
	b.Cleanup(direct.CloseIdleConnections)
	url := "http://" + e.addrA.String() + "/"
	benchOverhead(b, direct, url, pumped.client, pumped.url, e.client(), url)
}

// BenchmarkProxyOverheadTLS is BenchmarkProxyOverhead over HTTPS passed
// through by SNI (no inject rule): one handshake per connection, then
// spliced records; pumped and direct speak TLS to the same kind of server.
func BenchmarkProxyOverheadTLS(b *testing.B) {
	e := newEnv(b, allowAllowed)
	pumped := newPumpedDirect(b, e.id)
	direct := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.caPool, ServerName: "allowed.test"}}}
	b.Cleanup(direct.CloseIdleConnections)
	benchOverhead(b, direct, "https://"+e.addrA.String()+"/", pumped.client, pumped.tlsURL, e.client(), "https://allowed.test/")
}

// BenchmarkProxyOverheadMITM is BenchmarkProxyOverheadTLS with an inject
// rule for the domain and a CA: the proxy terminates the guest's TLS,
// injects the credential into every request, re-encrypts to the upstream
// and scrubs the response.
func BenchmarkProxyOverheadMITM(b *testing.B) {
	mod, ca := withCA(b, false)
	e := newEnvWith(b, injectPolicy, mod)
	pumped := newPumpedDirect(b, e.id)
	direct := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.caPool, ServerName: "allowed.test"}}}
	b.Cleanup(direct.CloseIdleConnections)
	guest := e.client()
	guest.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: caPool(*ca)}
	benchOverhead(b, direct, "https://"+e.addrA.String()+"/", pumped.client, pumped.tlsURL, guest, "https://allowed.test/")
}

// benchOverhead times b.N keep-alive GETs each way (direct from the host,
// pumped without the proxy, proxied from the guest), interleaved in slices
// so that a machine loaded by other work loads all three alike.
func benchOverhead(b *testing.B, direct *http.Client, directURL string, pumped *http.Client, pumpedURL string, guest *http.Client, guestURL string) {
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
	run(direct, directURL, 10) // warm connections and DNS
	run(guest, guestURL, 10)
	run(pumped, pumpedURL, 10)
	b.ResetTimer()
	var d, p, q time.Duration
	for left := b.N; left > 0; left -= 50 {
		n := min(left, 50)
		d += run(direct, directURL, n)
		q += run(pumped, pumpedURL, n)
		p += run(guest, guestURL, n)
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
