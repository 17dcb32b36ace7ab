package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"math/big"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
)

func TestParseWorkerFlags(t *testing.T) {
	cfg, err := ParseWorkerFlags([]string{"--data-dir", "/tmp/w1"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != DefaultWorkerListen || cfg.TokenFile != "/tmp/w1/worker.token" || cfg.VMM != "qemu" {
		t.Errorf("defaults: %+v", cfg)
	}
	for _, bad := range [][]string{
		{"--tls-cert-file", "c.pem"},
		{"--accel", "fast"},
		{"--vmm", "firecracker", "--accel", "tcg"},
		{"--pool-size", "-1"},
		{"extra"},
		{"--store", "sqlite"}, // the API's flags are not the worker's
	} {
		if _, err := ParseWorkerFlags(bad); err == nil {
			t.Errorf("ParseWorkerFlags(%v) accepted", bad)
		}
	}
}

func testToken(t *testing.T) remote.Token {
	b := make([]byte, 32)
	rand.Read(b)
	tok, err := remote.NewToken(hex.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// ServeWorker serves a worker until its ctx ends (in clear and over TLS);
// a command stream open then ends as unavailable, for its client to resume.
func TestServeWorker(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "h2c", true: "tls"}[useTLS], func(t *testing.T) {
			fw := apitest.NewWorker(t)
			tok := testToken(t)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			opts := WorkerServing{Token: tok}
			ccfg := remote.ClientConfig{Address: ln.Addr().String(), Token: tok}
			if useTLS {
				opts.TLS, ccfg.TLS = selfSigned(t)
			}
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			served := make(chan error, 1)
			go func() { served <- ServeWorker(ctx, fw, ln, opts) }()
			c, err := remote.NewClient(ccfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := c.CreateSandbox(cctx, worker.SandboxSpec{ID: "sbx_w", Template: "base", VCPUs: 1, MemoryMiB: 256}); err != nil {
				t.Fatal(err)
			}
			g, err := c.Agent(cctx, "sbx_w")
			if err != nil {
				t.Fatal(err)
			}
			// Exits wait for a watcher across the shutdown; the watch is open.
			_ = c.Exits()
			stop()
			select {
			case err := <-served:
				if err != nil {
					t.Errorf("ServeWorker: %v", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("ServeWorker did not return")
			}
			if _, err := g.List(cctx); errdefs.ClassOf(err) != errdefs.ErrUnavailable {
				t.Errorf("a call after shutdown: %v, want unavailable", err)
			}
		})
	}
}

// selfSigned makes a server TLS config for 127.0.0.1 and a client one
// trusting it.
func selfSigned(t *testing.T) (*tls.Config, *tls.Config) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "space worker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS13}
	return server, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
}

func TestEnsureToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "worker.token")
	a, created, err := remote.EnsureToken(path)
	if err != nil || !created {
		t.Fatalf("first EnsureToken: created %v, %v", created, err)
	}
	b, created, err := remote.EnsureToken(path)
	if err != nil || created {
		t.Fatalf("second EnsureToken: created %v, %v", created, err)
	}
	// Same token both times: a client made with one is accepted by a
	// server made with the other.
	fw := apitest.NewWorker(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeWorker(ctx, fw, ln, WorkerServing{Token: a}) }()
	defer func() { stop(); <-served }()
	c, err := remote.NewClient(remote.ClientConfig{Address: ln.Addr().String(), Token: b})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Sandboxes(cctx); err != nil {
		t.Errorf("token from the file: %v", err)
	}
}
