package agent

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func testCAPEM(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// bundleSubjects counts the certificates in the PEM bundle at path by
// subject CN (a bundle that does not parse fails the test).
func bundleSubjects(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return out
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out[c.Subject.CommonName]++
	}
}

func TestInstallTrustedCAWithoutTrustStore(t *testing.T) {
	root := t.TempDir()
	ca := testCAPEM(t, "deployment CA")
	if err := installTrustedCA(root, ca); err != nil {
		t.Fatal(err)
	}
	if got := bundleSubjects(t, filepath.Join(root, caBundle)); got["deployment CA"] != 1 || len(got) != 1 {
		t.Fatalf("bundle holds %v", got)
	}
	local, err := os.ReadFile(filepath.Join(root, caLocalFile))
	if err != nil || !bytes.Equal(local, ca) {
		t.Fatalf("local CA file %q %v", local, err)
	}
}

func TestInstallTrustedCAKeepsExistingAndReplacesItsOwn(t *testing.T) {
	root := t.TempDir()
	bundle := filepath.Join(root, caBundle)
	if err := os.MkdirAll(filepath.Dir(bundle), 0o755); err != nil {
		t.Fatal(err)
	}
	// An image bundle without a trailing newline.
	if err := os.WriteFile(bundle, bytes.TrimRight(testCAPEM(t, "public root"), "\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	first := testCAPEM(t, "old deployment CA")
	for i := 0; i < 2; i++ { // configured again after a restore
		if err := installTrustedCA(root, first); err != nil {
			t.Fatal(err)
		}
	}
	if got := bundleSubjects(t, bundle); got["public root"] != 1 || got["old deployment CA"] != 1 || len(got) != 2 {
		t.Fatalf("after two installs the bundle holds %v", got)
	}
	if err := installTrustedCA(root, testCAPEM(t, "new deployment CA")); err != nil {
		t.Fatal(err)
	}
	if got := bundleSubjects(t, bundle); got["public root"] != 1 || got["new deployment CA"] != 1 || len(got) != 2 {
		t.Fatalf("after a CA change the bundle holds %v", got)
	}
}

func TestInstallTrustedCARefusesKeys(t *testing.T) {
	root := t.TempDir()
	bad := append(testCAPEM(t, "ca"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1, 2, 3}})...)
	if err := installTrustedCA(root, bad); err == nil {
		t.Fatal("a PEM with a private key was installed")
	}
	if err := installTrustedCA(root, []byte("not pem")); err == nil {
		t.Fatal("garbage was installed")
	}
	if _, err := os.Stat(filepath.Join(root, caBundle)); !os.IsNotExist(err) {
		t.Fatalf("bundle written for refused input: %v", err)
	}
}
