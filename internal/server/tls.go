package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// The TLS of a cluster's two internal channels, both carrying the worker
// token: the worker protocol (the control plane dials its workers, which
// serve --tls-cert-file; the control plane trusts --worker-ca-file and
// checks the name --worker-server-name) and the worker's calls to the
// control plane's API for tenants' secrets (--control https://…, trusting
// --control-ca-file). The chart turns both on.

// WorkerServerTLS is the worker protocol's server TLS of cfg (nil: h2c).
func WorkerServerTLS(cfg WorkerConfig) (*tls.Config, error) {
	if cfg.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("worker protocol TLS: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}, nil
}

// WorkerClientTLS is how the control plane of cfg checks its workers'
// certificates (nil: the protocol runs in clear). Workers are dialled at
// their nodes' addresses, which a certificate made before the worker Pods
// exist cannot name: --worker-server-name is the name every worker's
// certificate holds instead (empty: the address dialled).
func WorkerClientTLS(cfg ControlConfig) (*tls.Config, error) {
	if cfg.WorkerCAFile == "" {
		if cfg.WorkerServerName != "" {
			return nil, fmt.Errorf("--worker-server-name needs --worker-ca-file")
		}
		return nil, nil
	}
	pool, err := loadCAPool(cfg.WorkerCAFile, "--worker-ca-file")
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, ServerName: cfg.WorkerServerName, MinVersion: tls.VersionTLS13}, nil
}

// controlClientTLS is how a worker checks the control plane's certificate
// for https:// --control URLs (nil: the system's roots).
func controlClientTLS(c NodeConfig) (*tls.Config, error) {
	if c.ControlCAFile == "" {
		return nil, nil
	}
	pool, err := loadCAPool(c.ControlCAFile, "--control-ca-file")
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// apiTLS is the API's server TLS (nil: plain HTTP).
func apiTLS(cfg Config) (*tls.Config, error) {
	if cfg.APITLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.APITLSCertFile, cfg.APITLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("API TLS: %w", err)
	}
	certs := []tls.Certificate{cert}
	preview, err := previewCertificate(cfg)
	if err != nil {
		return nil, err
	}
	if preview != nil {
		// The first is the default; a client naming a preview host (SNI)
		// gets the wildcard, which Go picks by the certificates' names.
		certs = append(certs, *preview)
	}
	return &tls.Config{Certificates: certs, MinVersion: tls.VersionTLS12}, nil
}

func loadCAPool(path, flagName string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flagName, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it", flagName, path)
	}
	return pool, nil
}
