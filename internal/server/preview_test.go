package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api"
	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/auth"
)

func TestPreviewFlags(t *testing.T) {
	dir := t.TempDir()
	writeCA(t, dir, "localhost")
	wild := filepath.Join(dir, "wild")
	os.Mkdir(wild, 0o700)
	writeCA(t, wild, "*.preview.test")
	apiTLSArgs := []string{"--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-key-file", filepath.Join(dir, "tls.key")}
	previewTLS := []string{"--preview-tls-cert", filepath.Join(wild, "tls.crt"), "--preview-tls-key", filepath.Join(wild, "tls.key")}
	cfg, err := ParseFlags([]string{"--data-dir", dir})
	if err != nil || cfg.PreviewDomain != "localhost" {
		t.Fatalf("default: %q %v", cfg.PreviewDomain, err)
	}
	cfg, err = ParseFlags(append([]string{"--data-dir", dir, "--preview-domain", "Preview.Test."}, append(apiTLSArgs, previewTLS...)...))
	if err != nil || cfg.PreviewDomain != "preview.test" {
		t.Fatalf("preview TLS: %q %v", cfg.PreviewDomain, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--preview-domain", ""}, "--preview-domain"},
		{[]string{"--preview-domain", "a..b"}, "--preview-domain"},
		{[]string{"--preview-domain", "-a.b"}, "--preview-domain"},
		{[]string{"--preview-domain", "a_b.test"}, "--preview-domain"},
		{[]string{"--preview-domain", "*.test"}, "--preview-domain"},
		{[]string{"--preview-domain", strings.Repeat("a", 64) + ".test"}, "--preview-domain"},
		{[]string{"--preview-tls-cert", "x"}, "go together"},
		{append([]string{"--preview-domain", "preview.test"}, previewTLS...), "needs --tls-cert-file"},
	} {
		_, err := ParseFlags(append([]string{"--data-dir", dir}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseFlags(%q) = %v, want an error naming %s", c.args, err, c.want)
		}
	}
	// A certificate that does not cover the preview domain is refused at start-up.
	cfg, err = ParseFlags(append([]string{"--data-dir", dir, "--preview-domain", "other.test"}, append(apiTLSArgs, previewTLS...)...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := apiTLS(cfg); err == nil || !strings.Contains(err.Error(), "*.other.test") {
		t.Fatalf("a certificate for another domain: %v", err)
	}
}

// The listener serves the wildcard to clients naming a preview host and
// the API's certificate otherwise, and speaks HTTP/2 over TLS.
func TestPreviewTLSBySNI(t *testing.T) {
	dir := t.TempDir()
	writeCA(t, dir, "localhost")
	wild := filepath.Join(dir, "wild")
	os.Mkdir(wild, 0o700)
	writeCA(t, wild, "*.preview.test")
	cfg, err := ParseFlags([]string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--preview-domain", "preview.test",
		"--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-key-file", filepath.Join(dir, "tls.key"),
		"--preview-tls-cert", filepath.Join(wild, "tls.crt"), "--preview-tls-key", filepath.Join(wild, "tls.key")})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveForTest(t, cfg)
	for _, c := range []struct{ sni, ca, name string }{
		{"localhost", dir, "localhost"},
		{"8080-sbx_01jf3k5m7p9r1t3v5x7z9b1d3f.preview.test", wild, "*.preview.test"},
	} {
		pool := x509.NewCertPool()
		pem, _ := os.ReadFile(filepath.Join(c.ca, "ca.crt"))
		pool.AppendCertsFromPEM(pem)
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr,
			&tls.Config{ServerName: c.sni, RootCAs: pool, NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			t.Fatalf("TLS to %s: %v", c.sni, err)
		}
		st := conn.ConnectionState()
		conn.Close()
		if got := st.PeerCertificates[0].DNSNames; len(got) != 1 || got[0] != c.name || st.NegotiatedProtocol != "h2" {
			t.Errorf("SNI %s: certificate %v, protocol %q", c.sni, got, st.NegotiatedProtocol)
		}
	}
}

// serveForTest serves the API of cfg (the API tests' worker) until the
// test ends, when serveAPI must return cleanly, and returns its address.
func serveForTest(t *testing.T, cfg Config) string {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	ctx, stop := context.WithCancel(context.Background())
	var td teardown
	t.Cleanup(td.run)
	db, err := openStore(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	td.add(func() { db.Close() })
	authn := auth.New(db, log)
	srv, svc, _, err := startAPI(cfg, apiParts{db: db, auth: authn, worker: apitest.NewWorker(t), metrics: api.NewMetrics()}, &td, log)
	if err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	served := make(chan error, 1)
	go func() { served <- serveAPI(ctx, cfg, srv, svc, authn, db, log, func(addr string) { addrc <- addr }) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("serveAPI: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("serveAPI did not return")
		}
	})
	select {
	case addr := <-addrc:
		return addr
	case err := <-served:
		t.Fatal(err)
	case <-time.After(time.Minute):
		t.Fatal("the API did not listen")
	}
	return ""
}

// A preview host's request goes to the port proxy whatever its path or
// headers: not to the E2B API in front of /v1 (its REST paths, its
// sandbox header) nor to /metrics.
func TestPreviewHostsComeFirst(t *testing.T) {
	dir := t.TempDir()
	cfg, err := ParseFlags([]string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--preview-domain", "preview.test"})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveForTest(t, cfg)
	host := "8080-sbx_01jf3k5m7p9r1t3v5x7z9b1d3f.preview.test"
	for _, c := range []struct{ path, header string }{{"/sandboxes", ""}, {"/health", ""}, {"/v2/sandboxes", ""}, {"/x", "E2b-Sandbox-Id"}, {"/metrics", ""}, {"/v1/sandboxes", ""}} {
		req, _ := http.NewRequest("GET", "http://"+addr+c.path, nil)
		req.Host = host
		if c.header != "" {
			req.Header.Set(c.header, "sbx_01jf3k5m7p9r1t3v5x7z9b1d3f")
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var eb struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		// The proxy's answer: the sandbox does not exist.
		if err != nil || resp.StatusCode != 404 || eb.Error.Code != "not_found" || !strings.Contains(eb.Error.Message, "sandbox") {
			t.Errorf("%s %s: %d %+v %v", c.path, c.header, resp.StatusCode, eb, err)
		}
	}
}
