package kuberig

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certLifetime bounds every certificate the rig makes: long enough for a
// `make cluster` left running for days, short enough that a leaked key is
// soon worthless.
const certLifetime = 30 * 24 * time.Hour

// authority is a certificate authority of the rig's own. There are two:
// the cluster's (the API server's and the components' serving certificates,
// every client certificate of the API) and etcd's (etcd's certificate and the
// API server's etcd client certificate), so no API client certificate opens
// etcd.
type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// keyPair is a signed certificate and its key, PEM-encoded and written to
// CertFile and KeyFile.
type keyPair struct {
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
}

// certRequest says what one leaf certificate is for.
type certRequest struct {
	commonName   string
	organization []string
	ips          []net.IP
	dnsNames     []string
	server       bool
	client       bool
}

// newAuthority makes a CA and writes it as dir/name.crt and dir/name.key.
func newAuthority(dir, name string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "space-kuberig-" + name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	ca := &authority{cert: cert, key: key, certPEM: pemBlock("CERTIFICATE", der)}
	keyPEM, err := privateKeyPEM(key)
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, name+".crt"), ca.certPEM); err != nil {
		return nil, err
	}
	// The controller manager signs CertificateSigningRequests with the
	// cluster CA's key.
	if err := writeFile(filepath.Join(dir, name+".key"), keyPEM); err != nil {
		return nil, err
	}
	return ca, nil
}

// issue signs a leaf certificate and writes it as dir/name.crt and dir/name.key.
func (ca *authority) issue(dir, name string, req certRequest) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("%s key: %w", name, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: req.commonName, Organization: req.organization},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		IPAddresses:  req.ips,
		DNSNames:     req.dnsNames,
	}
	if req.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("%s certificate: %w", name, err)
	}
	keyPEM, err := privateKeyPEM(key)
	if err != nil {
		return nil, err
	}
	kp := &keyPair{
		CertPEM:  pemBlock("CERTIFICATE", der),
		KeyPEM:   keyPEM,
		CertFile: filepath.Join(dir, name+".crt"),
		KeyFile:  filepath.Join(dir, name+".key"),
	}
	if err := writeFile(kp.CertFile, kp.CertPEM); err != nil {
		return nil, err
	}
	if err := writeFile(kp.KeyFile, kp.KeyPEM); err != nil {
		return nil, err
	}
	return kp, nil
}

// writeSigningKey writes the key pair the API server signs ServiceAccount
// tokens with (private) and verifies them with (public).
func writeSigningKey(privFile, pubFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	priv, err := privateKeyPEM(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	if err := writeFile(privFile, priv); err != nil {
		return err
	}
	return writeFile(pubFile, pemBlock("PUBLIC KEY", pub))
}

func privateKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	return pemBlock("PRIVATE KEY", der), nil
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("kuberig: crypto/rand failed: %v", err))
	}
	return n
}

// writeFile writes key material readable by its owner only.
func writeFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}
