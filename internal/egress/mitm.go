package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strconv"
	"time"
)

// whyUntrusted is the audit rule of an upstream whose certificate failed
// verification.
const whyUntrusted = "upstream certificate not trusted"

// intercept terminates a guest TLS connection whose SNI names a domain with
// inject rules (only when the Service has a CA): the guest gets a leaf for
// that name signed by the deployment CA, offering HTTP/1.1 only, and its
// requests go through serveHTTP, exactly as plain HTTP does, with each
// upstream reached over TLS verified against Config.UpstreamRoots for the
// request's Host. The SNI name must be allowed before anything is minted.
func (c *proxyConn) intercept(name string, br *bufio.Reader) {
	sb := c.sb
	port := c.dst.Port()
	rec := Record{Kind: "tls", Destination: net.JoinHostPort(name, strconv.Itoa(int(port)))}
	ok, rule := sb.rules.Load().decideName(name)
	rec.Rule = rule
	if !ok {
		sb.record(rec)
		return
	}
	g := tls.Server(&bufferedConn{Conn: c.guest, r: br}, &tls.Config{
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			return interceptConfig(sb.svc.cfg.CA, name, hello)
		},
	})
	_ = c.guest.SetDeadline(time.Now().Add(sb.svc.cfg.PeekTimeout))
	if err := g.HandshakeContext(sb.ctx); err != nil {
		// Most often a guest that does not trust the platform CA.
		if errors.Is(err, errNoLeaf) {
			sb.log.Warn("egress: mint leaf", "name", name, "err", err)
		}
		rec.Rule = rule + " (intercepted: guest TLS handshake failed)"
		sb.record(rec)
		return
	}
	_ = c.guest.SetDeadline(time.Time{})
	lim := &readLimit{r: g, n: -1}
	c.serveHTTP(g, bufio.NewReaderSize(lim, 64<<10), lim, true)
	_ = g.Close()
}

var errNoLeaf = errors.New("interception certificate unavailable")

// interceptConfig is the guest-facing TLS configuration for name: HTTP/1.1
// only, TLS 1.2 or later, an ECDSA leaf; a TLS 1.2 client that sends no
// signature_algorithms (busybox wget's own TLS) can only do RSA key
// exchange, so it gets an RSA leaf and those suites. The guest-to-proxy leg
// never leaves the host.
func interceptConfig(ca *CA, name string, hello *tls.ClientHelloInfo) (*tls.Config, error) {
	cfg := &tls.Config{NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	leaf, err := ca.Leaf(name)
	if len(hello.SignatureSchemes) == 0 {
		leaf, err = ca.LegacyLeaf(name)
		cfg.MaxVersion = tls.VersionTLS12
		cfg.CipherSuites = []uint16{tls.TLS_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_RSA_WITH_AES_256_GCM_SHA384}
	}
	if err != nil {
		return nil, errors.Join(errNoLeaf, err)
	}
	cfg.Certificates = []tls.Certificate{*leaf}
	return cfg, nil
}

// upstreamTLS runs the client handshake on conn for name, verifying the
// upstream's chain against the configured roots and name; on failure conn
// is closed and the reason returned for the audit.
func (sb *sandbox) upstreamTLS(ctx context.Context, conn net.Conn, name string) (net.Conn, string) {
	tc := tls.Client(conn, &tls.Config{
		ServerName: name,
		RootCAs:    sb.svc.roots,
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
	})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		var (
			unknown  x509.UnknownAuthorityError
			invalid  x509.CertificateInvalidError
			hostname x509.HostnameError
			verify   *tls.CertificateVerificationError
		)
		if errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname) {
			return nil, whyUntrusted
		}
		return nil, "upstream TLS handshake failed"
	}
	return tc, ""
}

// bufferedConn reads through the bufio.Reader that peeked the ClientHello.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }
