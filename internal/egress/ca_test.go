package egress

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCACreatedOnceWithPrivateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	ca, err := LoadOrCreateCA(dir)
	must(t, err)
	fi, err := os.Stat(filepath.Join(dir, CAKeyFile))
	must(t, err)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", fi.Mode().Perm())
	}
	again, err := LoadOrCreateCA(dir)
	must(t, err)
	if !bytes.Equal(ca.CertPEM(), again.CertPEM()) {
		t.Fatal("second start made a new CA")
	}
	if bytes.Contains(ca.CertPEM(), []byte("PRIVATE KEY")) {
		t.Fatal("CertPEM carries a key")
	}
	blk, rest := pem.Decode(ca.CertPEM())
	if blk == nil || blk.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("CertPEM is not one certificate: %q", ca.CertPEM())
	}
	c := ca.Certificate()
	if !c.IsCA || !c.MaxPathLenZero || c.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("CA certificate %+v", c)
	}

	must(t, os.Chmod(filepath.Join(dir, CAKeyFile), 0o644))
	if _, err := LoadOrCreateCA(dir); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("a world-readable key was accepted: %v", err)
	}
}

func TestCALeafChainsAndNamesSNI(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	must(t, err)
	now := time.Now().Truncate(time.Second) // certificates keep whole seconds
	ca.now = func() time.Time { return now }
	leaf, err := ca.Leaf("api.example.test")
	must(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	opts := x509.VerifyOptions{Roots: pool, DNSName: "api.example.test", CurrentTime: now}
	if _, err := leaf.Leaf.Verify(opts); err != nil {
		t.Fatalf("leaf does not chain to the CA: %v", err)
	}
	opts.DNSName = "other.example.test"
	if _, err := leaf.Leaf.Verify(opts); err == nil {
		t.Fatal("leaf valid for another name")
	}
	if got := leaf.Leaf.NotAfter.Sub(now); got != LeafLifetime {
		t.Fatalf("leaf lifetime %v", got)
	}
	if leaf.Leaf.IsCA {
		t.Fatal("leaf is a CA")
	}

	same, err := ca.Leaf("api.example.test")
	must(t, err)
	if same != leaf {
		t.Fatal("leaf not cached")
	}
	now = now.Add(LeafLifetime/2 + time.Minute)
	fresh, err := ca.Leaf("api.example.test")
	must(t, err)
	if fresh == leaf || !fresh.Leaf.NotAfter.Equal(now.Add(LeafLifetime)) {
		t.Fatal("leaf past half its lifetime not re-minted")
	}

	// Another CA's guest would not trust these leaves.
	other, err := LoadOrCreateCA(t.TempDir())
	must(t, err)
	opool := x509.NewCertPool()
	opool.AppendCertsFromPEM(other.CertPEM())
	if _, err := fresh.Leaf.Verify(x509.VerifyOptions{Roots: opool, DNSName: "api.example.test", CurrentTime: now}); err == nil {
		t.Fatal("leaf verified under another deployment's CA")
	}
}
