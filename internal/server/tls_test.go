package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// writeCA writes a CA and a server certificate for dnsName (no IP) it
// signed into dir: ca.crt, tls.crt, tls.key.
func writeCA(t *testing.T, dir, dnsName string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "space ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	for name, b := range map[string]*pem.Block{
		"ca.crt": {Type: "CERTIFICATE", Bytes: caDER}, "tls.crt": {Type: "CERTIFICATE", Bytes: der},
		"tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// A worker serving TLS with a certificate naming no address is reached by
// a control plane checking --worker-server-name, and refuses a client
// speaking the protocol in clear; without the name, the address dialled
// does not match the certificate and the handshake fails.
func TestWorkerTLSServerName(t *testing.T) {
	dir := t.TempDir()
	writeCA(t, dir, "space-worker.space-system.svc")
	wcfg, err := ParseWorkerFlags([]string{"--data-dir", dir, "--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-key-file", filepath.Join(dir, "tls.key")})
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := WorkerServerTLS(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	tok := testToken(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- ServeWorker(ctx, apitest.NewWorker(t), ln, WorkerServing{Token: tok, TLS: serverTLS})
	}()
	defer func() { stop(); <-served }()

	call := func(ccfg remote.ClientConfig) error {
		c, err := remote.NewClient(ccfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = c.Sandboxes(cctx)
		return err
	}
	control := func(extra ...string) ControlConfig {
		cfg := ControlConfig{WorkerCAFile: filepath.Join(dir, "ca.crt")}
		if len(extra) > 0 {
			cfg.WorkerServerName = extra[0]
		}
		return cfg
	}
	good, err := WorkerClientTLS(control("space-worker.space-system.svc"))
	if err != nil {
		t.Fatal(err)
	}
	if err := call(remote.ClientConfig{Address: ln.Addr().String(), Token: tok, TLS: good}); err != nil {
		t.Errorf("TLS with the worker's name: %v", err)
	}
	byAddress, err := WorkerClientTLS(control())
	if err != nil {
		t.Fatal(err)
	}
	if err := call(remote.ClientConfig{Address: ln.Addr().String(), Token: tok, TLS: byAddress}); err == nil {
		t.Error("TLS checking the address dialled (not in the certificate) succeeded")
	}
	if err := call(remote.ClientConfig{Address: ln.Addr().String(), Token: tok}); err == nil {
		t.Error("a plaintext (h2c) client was served by a TLS worker")
	}
	if _, err := WorkerClientTLS(ControlConfig{WorkerServerName: "x"}); err == nil {
		t.Error("--worker-server-name without --worker-ca-file accepted")
	}
}

// --metrics-listen serves /metrics on its own listener; the API's port
// answers it 404 and serves the rest.
func TestMetricsListen(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "api "+r.URL.Path) })
	errc := make(chan error, 1)
	addr, stop, err := serveMetrics("127.0.0.1:0", api, errc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for path, want := range map[string]int{"/metrics": http.StatusOK, "/v1/version": http.StatusNotFound} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("metrics listener %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	cfg, err := ParseFlags([]string{"--metrics-listen", "127.0.0.1:9090"})
	if err != nil || cfg.MetricsListen != "127.0.0.1:9090" {
		t.Fatalf("--metrics-listen: %+v %v", cfg.MetricsListen, err)
	}
	if _, err := ParseFlags([]string{"--tls-cert-file", "c.pem"}); err == nil {
		t.Error("--tls-cert-file without --tls-key-file accepted")
	}
	rec := func(h http.Handler, path string) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code
	}
	if got := rec(withoutMetrics(api), "/metrics"); got != http.StatusNotFound {
		t.Errorf("API port /metrics: %d, want 404", got)
	}
	if got := rec(withoutMetrics(api), "/v1/version"); got != http.StatusOK {
		t.Errorf("API port /v1/version: %d", got)
	}
}

// The API as `spaced control` serves it with --tls-cert-file and
// --metrics-listen: HTTPS for a client trusting the CA, no answer but an
// error to plain HTTP, no /metrics on its port, /metrics on the other.
func TestServeAPITLSAndMetrics(t *testing.T) {
	dir := t.TempDir()
	writeCA(t, dir, "localhost")
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := free.Addr().String()
	free.Close()
	cfg, err := ParseFlags([]string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--metrics-listen", metricsAddr,
		"--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-key-file", filepath.Join(dir, "tls.key")})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveForTest(t, cfg) // serveAPI returns cleanly at the end
	_, port, _ := net.SplitHostPort(addr)
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(c *http.Client, u string) (int, string, error) {
		resp, err := c.Get(u)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b), nil
	}
	if code, _, err := get(hc, "https://localhost:"+port+"/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("https /healthz: %d %v", code, err)
	}
	if code, _, err := get(hc, "https://localhost:"+port+"/metrics"); err != nil || code != http.StatusNotFound {
		t.Errorf("https /metrics on the API's port: %d %v, want 404", code, err)
	}
	plain := &http.Client{Timeout: 30 * time.Second}
	if code, _, err := get(plain, "http://"+addr+"/healthz"); err == nil && code == http.StatusOK {
		t.Error("plain HTTP served by the TLS API")
	}
	code, body, err := get(plain, "http://"+metricsAddr+"/metrics")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "space_") {
		t.Errorf("metrics listener: %d %v %.200q", code, err, body)
	}
}
