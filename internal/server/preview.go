package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
)

// checkPreview checks the preview flags: a domain name of DNS labels, the
// certificate and key together and only with the API's own TLS (the
// listener serves TLS to every client or to none).
func (cfg *Config) checkPreview() error {
	d := strings.TrimSuffix(strings.ToLower(cfg.PreviewDomain), ".")
	if err := checkDomain(d); err != nil {
		return fmt.Errorf("--preview-domain %q: %w", cfg.PreviewDomain, err)
	}
	cfg.PreviewDomain = d
	if (cfg.PreviewTLSCertFile == "") != (cfg.PreviewTLSKeyFile == "") {
		return fmt.Errorf("--preview-tls-cert and --preview-tls-key go together")
	}
	if cfg.PreviewTLSCertFile != "" && cfg.APITLSCertFile == "" {
		return fmt.Errorf("--preview-tls-cert needs --tls-cert-file: the listener serves the API and the preview hosts, over TLS for both or for neither")
	}
	return nil
}

// checkDomain accepts a DNS name: labels of a-z, 0-9 and -, neither
// starting nor ending with -, at most 63 characters each, 253 in all.
func checkDomain(d string) error {
	if d == "" || len(d) > 253 {
		return fmt.Errorf("must be a DNS name of 1-253 characters")
	}
	for _, l := range strings.Split(d, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("label %q must be 1-63 characters of a-z, 0-9 and -, not starting or ending with -", l)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("label %q must be 1-63 characters of a-z, 0-9 and -, not starting or ending with -", l)
			}
		}
	}
	return nil
}

// previewCertificate loads the preview certificate of cfg and checks it
// names *.domain (nil: none configured).
func previewCertificate(cfg Config) (*tls.Certificate, error) {
	if cfg.PreviewTLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.PreviewTLSCertFile, cfg.PreviewTLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("preview TLS: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("preview TLS: %w", err)
	}
	probe := "1-sbx_probe." + cfg.PreviewDomain
	if err := leaf.VerifyHostname(strings.ReplaceAll(probe, "_", "-")); err != nil {
		return nil, fmt.Errorf("--preview-tls-cert must cover *.%s: %w", cfg.PreviewDomain, err)
	}
	cert.Leaf = leaf
	return &cert, nil
}
