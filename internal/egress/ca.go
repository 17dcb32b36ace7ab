package egress

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

// CA file names in the data dir.
const (
	CACertFile = "egress-ca.crt"
	CAKeyFile  = "egress-ca.key"
)

// Leaf lifetimes: a leaf is valid from an hour before it is minted (guest
// clocks lag after a pause) for LeafLifetime, and re-minted once less than
// half of it is left.
const (
	LeafLifetime = 24 * time.Hour
	leafBackdate = time.Hour
	maxLeaves    = 4096
)

// CA is the per-deployment certificate authority the proxy signs
// interception leaves with. Its key never leaves the host: the guest gets
// CertPEM only.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	now     func() time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
	rsaKey *rsa.PrivateKey // for LegacyLeaf
}

// LoadOrCreateCA reads <dir>/egress-ca.{crt,key}, creating them (ECDSA
// P-256, key mode 0600) at first start. A key readable by group or others
// is refused, as is a key that does not match the certificate.
func LoadOrCreateCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	_, cerr := os.Stat(certPath)
	_, kerr := os.Stat(keyPath)
	if errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist) {
		if err := createCA(dir, certPath, keyPath); err != nil {
			return nil, err
		}
	}
	return LoadCA(certPath, keyPath)
}

func createCA(dir, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("egress CA key: %w", errors.Join(errdefs.ErrInternal, err))
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: randSerial(),
		Subject:      pkix.Name{CommonName: "SPACE egress CA " + hex.EncodeToString(id), Organization: []string{"SPACE"}},
		NotBefore:    now.Add(-leafBackdate), NotAfter: now.AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("egress CA certificate: %w", errors.Join(errdefs.ErrInternal, err))
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("egress CA key: %w", errors.Join(errdefs.ErrInternal, err))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("egress CA dir: %w", errors.Join(errdefs.ErrInternal, err))
	}
	// The key first, exclusively: a racing process that made it first wins
	// and this one reads its pair.
	f, err := os.OpenFile(keyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create egress CA key: %w", errors.Join(errdefs.ErrInternal, err))
	}
	werr := pem.Encode(f, &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		_ = os.Remove(keyPath)
		return fmt.Errorf("write egress CA key: %w", errors.Join(errdefs.ErrInternal, err))
	}
	cpem := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(certPath+".tmp", cpem, 0o644); err != nil {
		return fmt.Errorf("write egress CA certificate: %w", errors.Join(errdefs.ErrInternal, err))
	}
	if err := os.Rename(certPath+".tmp", certPath); err != nil {
		return fmt.Errorf("write egress CA certificate: %w", errors.Join(errdefs.ErrInternal, err))
	}
	return nil
}

// LoadCA reads a CA certificate and its key (PEM, EC or PKCS#8 ECDSA).
func LoadCA(certPath, keyPath string) (*CA, error) {
	fi, err := os.Stat(keyPath)
	if err != nil {
		return nil, fmt.Errorf("egress CA key: %w", errors.Join(errdefs.ErrFailedPrecondition, err))
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("egress CA key %s is readable by others (mode %v; want 0600): %w", keyPath, fi.Mode().Perm(), errdefs.ErrFailedPrecondition)
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("egress CA %s: %w", certPath, errors.Join(errdefs.ErrFailedPrecondition, err))
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("egress CA key %s is not ECDSA: %w", keyPath, errdefs.ErrFailedPrecondition)
	}
	cert := pair.Leaf
	if cert == nil {
		if cert, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("egress CA %s: %w", certPath, errors.Join(errdefs.ErrFailedPrecondition, err))
		}
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("egress CA %s is not a CA certificate: %w", certPath, errdefs.ErrFailedPrecondition)
	}
	return &CA{
		cert: cert, key: key, now: time.Now, leaves: map[string]*tls.Certificate{},
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
	}, nil
}

// CertPEM is the CA certificate (never the key), for guests' trust stores.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// Certificate is the parsed CA certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Leaf returns an ECDSA P-256 certificate for name signed by the CA, minted
// on first use and cached until less than half its lifetime is left.
func (ca *CA) Leaf(name string) (*tls.Certificate, error) { return ca.leaf(name, false) }

// LegacyLeaf is Leaf with an RSA key, for TLS 1.2 clients that send no
// signature_algorithms (busybox wget): they can only use RSA key exchange.
// One RSA key (made on first use) serves every legacy leaf of the CA.
func (ca *CA) LegacyLeaf(name string) (*tls.Certificate, error) { return ca.leaf(name, true) }

func (ca *CA) leaf(name string, legacy bool) (*tls.Certificate, error) {
	now := ca.now()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	slot := name
	if legacy {
		slot = "rsa:" + name
	}
	if c, ok := ca.leaves[slot]; ok && c.Leaf.NotAfter.Sub(now) > LeafLifetime/2 {
		return c, nil
	}
	var key crypto.Signer
	var err error
	if legacy {
		if ca.rsaKey == nil {
			if ca.rsaKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
				return nil, fmt.Errorf("leaf key: %w", errors.Join(errdefs.ErrInternal, err))
			}
		}
		key = ca.rsaKey
	} else if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, fmt.Errorf("leaf key: %w", errors.Join(errdefs.ErrInternal, err))
	}
	usage := x509.KeyUsageDigitalSignature
	if legacy {
		usage |= x509.KeyUsageKeyEncipherment
	}
	notAfter := now.Add(LeafLifetime)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: randSerial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-leafBackdate), NotAfter: notAfter,
		KeyUsage:    usage,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", name, errors.Join(errdefs.ErrInternal, err))
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", name, errors.Join(errdefs.ErrInternal, err))
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}
	if len(ca.leaves) >= maxLeaves {
		clear(ca.leaves)
	}
	ca.leaves[slot] = c
	return c, nil
}

func randSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil || n.Sign() == 0 {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
