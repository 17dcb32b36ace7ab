package agent

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Where the guest's TLS clients look for trusted CAs: the Debian-style
// bundle most clients read (OpenSSL, Python, Go, curl), and the directory
// update-ca-certificates builds it from, so a rebuild keeps the CA.
const (
	caBundle    = "etc/ssl/certs/ca-certificates.crt"
	caLocalFile = "usr/local/share/ca-certificates/space-egress.crt"
)

// The platform CA sits in the bundle between these lines, so configuring
// again (after every restore) replaces it rather than adding a copy.
var (
	caBegin = []byte("# BEGIN space egress CA\n")
	caEnd   = []byte("# END space egress CA\n")
)

// installTrustedCA adds the PEM certificates in ca to the trust store under
// root: it writes the local CA file and puts them in the bundle (creating
// the bundle when the image has none). Anything but certificates is refused.
func installTrustedCA(root string, ca []byte) error {
	var certs bytes.Buffer
	for rest := ca; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return fmt.Errorf("trusted CA: %s block: %w", blk.Type, errdefs.ErrInvalidArgument)
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return fmt.Errorf("trusted CA: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		_ = pem.Encode(&certs, blk)
	}
	if certs.Len() == 0 {
		return fmt.Errorf("trusted CA: no certificate: %w", errdefs.ErrInvalidArgument)
	}
	local := filepath.Join(root, caLocalFile)
	if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
		return fmt.Errorf("trusted CA: %w", errors.Join(errdefs.ErrInternal, err))
	}
	if err := writeFileReplacing(local, certs.Bytes(), 0o644); err != nil {
		return fmt.Errorf("trusted CA: %w", errors.Join(errdefs.ErrInternal, err))
	}
	bundle := filepath.Join(root, caBundle)
	old, err := os.ReadFile(bundle)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("trusted CA: %w", errors.Join(errdefs.ErrInternal, err))
	}
	if err := os.MkdirAll(filepath.Dir(bundle), 0o755); err != nil {
		return fmt.Errorf("trusted CA: %w", errors.Join(errdefs.ErrInternal, err))
	}
	if err := writeFileReplacing(bundle, withCABlock(old, certs.Bytes()), 0o644); err != nil {
		return fmt.Errorf("trusted CA: %w", errors.Join(errdefs.ErrInternal, err))
	}
	return nil
}

// withCABlock returns bundle with its space block (if any) replaced by one
// holding certs, at the end.
func withCABlock(bundle, certs []byte) []byte {
	if i := bytes.Index(bundle, caBegin); i >= 0 {
		rest := bundle[i:]
		if j := bytes.Index(rest, caEnd); j >= 0 {
			bundle = append(append([]byte(nil), bundle[:i]...), rest[j+len(caEnd):]...)
		}
	}
	out := append([]byte(nil), bundle...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	out = append(out, caBegin...)
	out = append(out, certs...)
	return append(out, caEnd...)
}
