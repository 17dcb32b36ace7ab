package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/network"
)

// verifyingClient is a static Go program run in the guest: an HTTPS GET
// that verifies the server against the guest's own trust store
// (/etc/ssl/certs/ca-certificates.crt), offering h2 and http/1.1, and
// prints who issued the certificate it accepted.
const verifyingClient = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	resp, err := http.Get(os.Args[1])
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	defer resp.Body.Close()
	fmt.Printf("status=%d issuer=%q proto=%s alpn=%q\n", resp.StatusCode,
		resp.TLS.PeerCertificates[0].Issuer.CommonName, resp.Proto, resp.TLS.NegotiatedProtocol)
	io.Copy(os.Stdout, resp.Body)
}
`

// testCA makes a CA and a leaf for the e2e upstream names; it returns the
// CA's PEM and the leaf.
func testCA(t *testing.T) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: allowedHost},
		DNSNames:  []string{allowedHost, otherHost},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}
}

// startTLSUpstream adds an HTTPS echo server on port 443 of both upstream
// addresses in startUpstream's namespace; requests are recorded in u under
// "<label>-tls".
func startTLSUpstream(t *testing.T, u *upstream, cert tls.Certificate) {
	t.Helper()
	ns := u.ns
	for label, a := range map[string]string{"allowed": upAllowed.String(), "other": upOther.String()} {
		var l net.Listener
		if err := network.InNamespace(ns, func() (err error) {
			l, err = net.Listen("tcp4", net.JoinHostPort(a, "443"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		label := label + "-tls"
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u.mu.Lock()
			u.seen[label] = append(u.seen[label], r.Header.Clone())
			u.mu.Unlock()
			w.Header().Set("X-Echo-Api-Key", r.Header.Get("X-Api-Key"))
			fmt.Fprintf(w, "server=%s host=%s proto=%s\n", label, r.Host, r.Proto)
			r.Header.Write(w)
		})}
		go srv.Serve(tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}}))
		t.Cleanup(func() { srv.Close() })
	}
}

func TestHTTPSInject(t *testing.T) {
	u := startUpstream(t)
	caPEM, cert := testCA(t)
	startTLSUpstream(t, u, cert)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	client := filepath.Join(t.TempDir(), "tlsget")
	src := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(src, []byte(verifyingClient), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", client, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the guest client: %v\n%s", err, out)
	}

	srv := startServer(t, "--feature", "egress_https_inject", "--feature", "network_log", "--egress-ca-file", caFile,
		"--egress-allow-private", "198.18.0.0/15") // the upstreams' lab network
	c := srv.client(newTenantKey(t, srv, "httpsco"))
	var feats apiv1.FeatureList
	c.mustDo("GET", "/v1/features", nil, &feats, 200)
	for _, f := range feats.Features {
		if f.Name == "egress_https_inject" && !f.Enabled {
			t.Fatalf("gate off: %+v", f)
		}
	}
	c.mustDo("PUT", "/v1/secrets/e2e-token", map[string]string{"value": e2eSecret}, nil, 201)
	sbx := c.createSandbox(map[string]any{"network": map[string]any{
		"egress": map[string]any{"allow": []string{allowedHost, otherHost}},
		"inject": []map[string]string{{"domain": allowedHost, "header": "X-Api-Key", "value": "Bearer ${secret:e2e-token}"}},
	}})
	t.Cleanup(func() { c.deleteSandbox(sbx.ID) })

	b, err := os.ReadFile(client)
	if err != nil {
		t.Fatal(err)
	}
	putFile(t, c, sbx.ID, "/tmp/tlsget", string(b))
	if code, out := sh(t, c, sbx.ID, "chmod 0755 /tmp/tlsget"); code != 0 {
		t.Fatalf("chmod: %s", out)
	}
	deploymentCA, err := os.ReadFile(filepath.Join(srv.dataDir, "egress-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("guest trust store holds the CA certificate, no key", func(t *testing.T) {
		bundle := getFile(t, c, sbx.ID, "/etc/ssl/certs/ca-certificates.crt")
		local := getFile(t, c, sbx.ID, "/usr/local/share/ca-certificates/space-egress.crt")
		want := strings.ReplaceAll(string(deploymentCA), "\n", "") // getFile joins lines
		if !strings.Contains(bundle, want) || local != want {
			t.Fatalf("trust store lacks the deployment CA:\nbundle %q\nlocal %q", bundle, local)
		}
		code, out := sh(t, c, sbx.ID, "grep -r -l 'PRIVATE KEY' /etc /usr/local /root 2>/dev/null; true")
		if code != 0 || strings.TrimSpace(out) != "" {
			t.Fatalf("a private key in the guest: %s", out)
		}
	})
	t.Run("verifying client: credential injected, echo scrubbed", func(t *testing.T) {
		code, out := sh(t, c, sbx.ID, "timeout 30 /tmp/tlsget https://"+allowedHost+"/ > /tmp/https-resp.txt 2>&1; rc=$?; cat /tmp/https-resp.txt; exit $rc")
		if code != 0 || !strings.Contains(out, "status=200") || !strings.Contains(out, "server=allowed-tls") {
			t.Fatalf("exit %d: %s", code, out)
		}
		if !strings.Contains(out, `issuer="SPACE egress CA`) || !strings.Contains(out, `alpn="http/1.1"`) {
			t.Fatalf("not served by the interception leaf over http/1.1: %s", out)
		}
		hs := u.headers("allowed-tls")
		if len(hs) == 0 || hs[len(hs)-1].Get("X-Api-Key") != "Bearer "+e2eSecret {
			t.Fatalf("upstream did not get the injected header: %v", hs)
		}
		if strings.Contains(out, e2eSecret) || !strings.Contains(out, "X-Api-Key: Bearer ****") {
			t.Fatalf("echo not scrubbed: %s", out)
		}
	})
	// busybox 1.35's own TLS sends no signature_algorithms: the proxy
	// serves it an RSA leaf with RSA key exchange.
	t.Run("busybox wget: credential injected", func(t *testing.T) {
		n := len(u.headers("allowed-tls"))
		code, out := sh(t, c, sbx.ID, "timeout 30 wget -q -O - https://"+allowedHost+"/ 2>&1")
		if code != 0 || !strings.Contains(out, "server=allowed-tls") || strings.Contains(out, e2eSecret) {
			t.Fatalf("exit %d: %s", code, out)
		}
		hs := u.headers("allowed-tls")
		if len(hs) != n+1 || hs[n].Get("X-Api-Key") != "Bearer "+e2eSecret {
			t.Fatalf("upstream headers %v", hs)
		}
	})
	t.Run("domain without inject rules passes through", func(t *testing.T) {
		// The guest does not trust the upstream's test CA: a verifying client
		// fails, which shows the proxy did not substitute its own leaf.
		code, out := sh(t, c, sbx.ID, "timeout 30 /tmp/tlsget https://"+otherHost+"/ 2>&1")
		if code == 0 || !strings.Contains(out, "certificate signed by unknown authority") {
			t.Fatalf("verifying client to %s: exit %d: %s", otherHost, code, out)
		}
		if len(u.headers("other-tls")) != 0 {
			t.Fatal("a request reached the upstream after a failed handshake")
		}
	})
	t.Run("secret in no file of the guest, network log", func(t *testing.T) {
		half := len(e2eSecret) / 2
		_, out := sh(t, c, sbx.ID, fmt.Sprintf(`a='%s'; b='%s'; n="$a$b"; grep -l -F "$n" /proc/[0-9]*/environ 2>/dev/null; `+
			`grep -r -l -F "$n" /etc /root /tmp /usr/local 2>/dev/null; test -s /tmp/https-resp.txt && echo resp-present`,
			e2eSecret[:half], e2eSecret[half:]))
		if strings.TrimSpace(out) != "resp-present" {
			t.Fatalf("secret found in the guest (or no response kept): %q", out)
		}
		var lg apiv1.NetworkLog
		c.mustDo("GET", "/v1/sandboxes/"+sbx.ID+"/network/log", nil, &lg, 200)
		var https, passed bool
		for _, r := range lg.Records {
			https = https || (r.Kind == "https" && r.Allowed && len(r.Injected) == 1 && strings.HasPrefix(r.Destination, allowedHost))
			passed = passed || (r.Kind == "tls" && r.Allowed && strings.HasPrefix(r.Destination, otherHost))
		}
		if !https || !passed {
			t.Fatalf("log lacks https=%v passed=%v: %+v", https, passed, lg.Records)
		}
		logged, _ := os.ReadFile(srv.log.Name())
		if strings.Contains(string(logged), e2eSecret) {
			t.Fatal("spaced logged the secret")
		}
	})
}
