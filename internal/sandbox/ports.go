package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// Ports: reaching a TCP server inside a sandbox's guest from outside. The
// bytes travel over the agent link to 127.0.0.1:port in the guest (never
// the guest's network, so a deny-by-default sandbox can be reached and
// ingress never opens egress). Who may: the owner (an edge that
// authenticated the tenant's key passes the tenant), the holder of a port
// URL's token (bound to one port, expiring), the holder of the sandbox's
// traffic token (every port, for the sandbox's life), anyone for a public
// URL until it expires. A sandbox that is not running is conflict (409,
// details.state); waking it on the first request waits for the lifecycle
// issue's auto_resume, which is not built.

// Port URL lifetimes.
const (
	DefaultPortURLTTL = time.Hour
	MaxPortURLTTL     = 7 * 24 * time.Hour
)

// PortTokenPrefix starts every port token: 32 random bytes follow in
// base64url, and only their SHA-256 is kept.
const PortTokenPrefix = "spt_"

// PortURL is a handed-out way into one port (store.PortToken without the
// secret, which the caller gets once).
type PortURL = store.PortToken

// PortGrant is what a token opened: the sandbox's tenant, which record
// (TokenID; empty for the owner's key), and until when (nil: the
// sandbox's life).
type PortGrant struct {
	Tenant    string
	TokenID   string
	Public    bool
	ExpiresAt *time.Time
}

// hashPortToken is what the store keeps of a token.
func hashPortToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func newPortToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on Linux ≥ 3.17
	}
	return PortTokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// portSandbox is tenant's sandbox id as the port calls see it: a deleted
// one is not found, like an unknown one or another tenant's.
func (s *Service) portSandbox(ctx context.Context, tenant, id string) (*store.Sandbox, error) {
	sb, err := s.store.GetSandbox(ctx, tenant, id)
	if err == nil && sb.State == store.SandboxDeleted {
		err = errdefs.New(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	return sb, err
}

// runningSandbox is portSandbox, conflict unless the sandbox runs.
func (s *Service) runningSandbox(ctx context.Context, tenant, id string) (*store.Sandbox, error) {
	sb, err := s.portSandbox(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if sb.State != store.SandboxRunning {
		return nil, errdefs.New(errdefs.ErrConflict, "sandbox %s is %s: its ports are reachable only while it runs", id, sb.State).
			WithDetails(map[string]any{"state": string(sb.State)})
	}
	return sb, nil
}

// ListPorts is what listens on TCP in tenant's running sandbox.
func (s *Service) ListPorts(ctx context.Context, tenant, sandboxID string) ([]agentproto.ListeningPort, error) {
	sb, err := s.runningSandbox(ctx, tenant, sandboxID)
	if err != nil {
		return nil, err
	}
	g, err := s.Agent(ctx, sb.ID)
	if err != nil {
		return nil, err
	}
	return g.ListPorts(ctx)
}

// DialPort opens a byte stream to port in tenant's running sandbox. The
// connection counts as activity (no idle suspend while it is open), counts
// its bytes (PortConn), and is closed when the sandbox leaves running.
// failed_precondition when nothing listens on the port.
func (s *Service) DialPort(ctx context.Context, tenant, sandboxID string, port uint16) (*PortConn, error) {
	if port == 0 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "port must be 1-65535")
	}
	sb, err := s.runningSandbox(ctx, tenant, sandboxID)
	if err != nil {
		return nil, err
	}
	g, err := s.Agent(ctx, sb.ID)
	if err != nil {
		return nil, err
	}
	stopped := s.Stopped(sb.ID)
	c, err := g.DialPort(ctx, port)
	if err != nil {
		return nil, err
	}
	pc := &PortConn{Conn: c, release: s.StreamAttached(context.WithoutCancel(ctx), sb.ID), done: make(chan struct{})}
	go func() {
		select {
		case <-stopped:
			pc.Close()
		case <-pc.done:
		}
	}()
	return pc, nil
}

// PortConn is a connection DialPort made: a net.Conn that counts what
// crosses it. It keeps the guest's half-close (CloseWrite) when the link's
// stream has one.
type PortConn struct {
	net.Conn
	in, out   atomic.Int64
	release   func()
	done      chan struct{}
	closeOnce sync.Once
}

// Read counts bytes from the guest.
func (c *PortConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

// Write counts bytes to the guest.
func (c *PortConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

// CloseWrite half-closes the stream when the guest side supports it.
func (c *PortConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// Close ends both directions; safe to call twice.
func (c *PortConn) Close() error {
	err := error(nil)
	c.closeOnce.Do(func() {
		close(c.done)
		err = c.Conn.Close()
		c.release()
	})
	return err
}

// Bytes are the bytes sent to the guest (out) and received from it (in).
func (c *PortConn) Bytes() (in, out int64) { return c.in.Load(), c.out.Load() }

// CreatePortURL hands out a way into port of tenant's sandbox for ttl (0:
// DefaultPortURLTTL; at most MaxPortURLTTL). A private URL's token comes
// back once and only its hash is kept; a public URL has none.
func (s *Service) CreatePortURL(ctx context.Context, tenant, sandboxID string, port uint16, public bool, ttl time.Duration) (*PortURL, string, error) {
	if port == 0 {
		return nil, "", errdefs.New(errdefs.ErrInvalidArgument, "port must be 1-65535")
	}
	if ttl == 0 {
		ttl = DefaultPortURLTTL
	}
	if ttl < time.Second || ttl > MaxPortURLTTL {
		return nil, "", errdefs.New(errdefs.ErrInvalidArgument, "ttl_seconds must be 1-%d", int(MaxPortURLTTL/time.Second))
	}
	sb, err := s.portSandbox(ctx, tenant, sandboxID)
	if err != nil {
		return nil, "", err
	}
	expires := time.Now().Add(ttl).UTC()
	rec := &store.PortToken{TenantID: sb.TenantID, SandboxID: sb.ID, Port: port, Public: public, ExpiresAt: &expires}
	var token string
	if !public {
		token = newPortToken()
		rec.Hash = hashPortToken(token)
	}
	if err := s.store.CreatePortToken(ctx, rec); err != nil {
		return nil, "", err
	}
	return rec, token, nil
}

// SandboxTrafficToken mints a token for every port of tenant's sandbox,
// valid as long as the sandbox (E2B's trafficAccessToken, handed out by
// create and connect). Each call mints a new one (only hashes are kept,
// so none can be shown again); all stay valid.
func (s *Service) SandboxTrafficToken(ctx context.Context, tenant, sandboxID string) (string, error) {
	sb, err := s.portSandbox(ctx, tenant, sandboxID)
	if err != nil {
		return "", err
	}
	token := newPortToken()
	if err := s.store.CreatePortToken(ctx, &store.PortToken{TenantID: sb.TenantID, SandboxID: sb.ID, Hash: hashPortToken(token)}); err != nil {
		return "", err
	}
	return token, nil
}

// AuthorizePort says whether a request to port of sandbox may pass
// without an API key: with a public URL of the port that has not expired
// (token ignored), or with token, a port URL's for this port or the
// sandbox's traffic token. An unknown or deleted sandbox is not_found
// whatever the token; a missing, wrong or expired token unauthenticated.
func (s *Service) AuthorizePort(ctx context.Context, sandboxID string, port uint16, token string) (PortGrant, error) {
	sb, err := s.portSandbox(ctx, store.AnyTenant, sandboxID)
	if err != nil {
		return PortGrant{}, err
	}
	now := time.Now()
	if token != "" && strings.HasPrefix(token, PortTokenPrefix) {
		rec, err := s.store.GetPortTokenByHash(ctx, sb.ID, hashPortToken(token))
		switch {
		case err == nil && rec.TenantID == sb.TenantID && !rec.Expired(now) && (rec.Port == 0 || rec.Port == port):
			return PortGrant{Tenant: sb.TenantID, TokenID: rec.ID, ExpiresAt: rec.ExpiresAt}, nil
		case err != nil && errdefs.ClassOf(err) != errdefs.ErrNotFound:
			return PortGrant{}, err
		}
	}
	recs, err := s.store.ListPortTokens(ctx, sb.ID)
	if err != nil {
		return PortGrant{}, err
	}
	for _, rec := range recs {
		if rec.Public && rec.Port == port && !rec.Expired(now) && rec.TenantID == sb.TenantID {
			return PortGrant{Tenant: sb.TenantID, TokenID: rec.ID, Public: true, ExpiresAt: rec.ExpiresAt}, nil
		}
	}
	if token == "" {
		return PortGrant{}, errdefs.New(errdefs.ErrUnauthenticated, "port %d of sandbox %s needs a port token or the owner's API key", port, sb.ID)
	}
	return PortGrant{}, errdefs.New(errdefs.ErrUnauthenticated, "the port token is wrong, expired or for another port")
}

// forgetPorts drops what a deleted sandbox had of ports: its URLs and
// tokens, its connection log.
func (s *Service) forgetPorts(ctx context.Context, sandboxID string) {
	if err := s.store.DeletePortTokens(ctx, sandboxID); err != nil {
		s.logger.Error("delete port tokens", "sandbox", sandboxID, "err", err)
	}
	s.portLog.forget(sandboxID)
}
