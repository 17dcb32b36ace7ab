package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/workerpb"
	"github.com/space-sandbox/space/internal/workerpb/workerpbconnect"
)

// DefaultSecretTTL is how long a ControlClient keeps a resolved secret (or
// the answer that it does not resolve). One second: a rotation or a delete
// through the API bites on a worker at most a second later, as it would
// on one node within one request's time, while a guest that sends many
// requests a second costs the control plane one lookup a second per
// secret, not one per request.
const DefaultSecretTTL = time.Second

// ControlClientConfig says how a worker reaches its control plane.
type ControlClientConfig struct {
	// URLs of the control plane (http:// or https://), tried in turn when
	// one cannot be reached: a Service's, or the replicas' own.
	URLs  []string
	Token Token
	// Node is this worker's node name, sent with every call: the control
	// plane answers for sandboxes bound to it only.
	Node string
	// TLS configures https:// URLs (nil: the system's roots).
	TLS *tls.Config
	// SecretTTL is how long answers are kept (DefaultSecretTTL when 0;
	// negative: not kept).
	SecretTTL time.Duration
	Logger    *slog.Logger
}

// ControlClient is a worker's client of ControlService. Its cache holds
// values in memory only, and no error or log line of it holds one.
type ControlClient struct {
	cfg     ControlClientConfig
	log     *slog.Logger
	http    *http.Client
	clients []workerpbconnect.ControlServiceClient

	mu     sync.Mutex
	next   int // the URL tried first
	cached map[secretKey]secretAnswer
}

type secretKey struct{ sandbox, name string }

type secretAnswer struct {
	value   string
	missing bool // not_found: the secret does not resolve for the sandbox
	expires time.Time
}

// maxCachedSecrets bounds the cache; expired answers go first.
const maxCachedSecrets = 4096

// NewControlClient returns a client of the control plane at cfg.URLs.
func NewControlClient(cfg ControlClientConfig) (*ControlClient, error) {
	if err := cfg.Token.valid(); err != nil {
		return nil, err
	}
	if len(cfg.URLs) == 0 || cfg.Node == "" {
		return nil, errors.New("remote: a control client needs the control plane's URLs and this worker's node name")
	}
	if cfg.SecretTTL == 0 {
		cfg.SecretTTL = DefaultSecretTTL
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	hc := &http.Client{Transport: &http.Transport{
		TLSClientConfig:     cfg.TLS,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}}
	opts := connect.WithClientOptions(
		connect.WithReadMaxBytes(1<<20),
		connect.WithSendMaxBytes(64<<10),
		connect.WithInterceptors(tokenInterceptor{header: cfg.Token.header()}),
	)
	c := &ControlClient{cfg: cfg, log: log.With("component", "control-protocol"), http: hc,
		cached: map[secretKey]secretAnswer{}}
	for _, u := range cfg.URLs {
		base, err := baseURL(u, false)
		if err != nil {
			return nil, fmt.Errorf("control URL: %w", err)
		}
		c.clients = append(c.clients, workerpbconnect.NewControlServiceClient(hc, base, opts))
	}
	return c, nil
}

// Close drops idle connections.
func (c *ControlClient) Close() { c.http.CloseIdleConnections() }

// secretCallTimeout bounds one ResolveSecret call (the guest's request
// waits for it).
const secretCallTimeout = 5 * time.Second

// Secret returns the current value of secret name for sandbox sandboxID's
// egress proxy: errdefs.ErrNotFound when it does not resolve for that
// sandbox (no such secret of its tenant, or the sandbox is not on this
// node), errdefs.ErrUnavailable when the control plane cannot answer.
func (c *ControlClient) Secret(ctx context.Context, sandboxID, name string) (string, error) {
	key := secretKey{sandboxID, name}
	now := time.Now()
	c.mu.Lock()
	a, ok := c.cached[key]
	first := c.next
	c.mu.Unlock()
	if ok && now.Before(a.expires) {
		return a.get(name)
	}
	ctx, cancel := context.WithTimeout(ctx, secretCallTimeout)
	defer cancel()
	msg := &workerpb.ResolveSecretRequest{SandboxId: sandboxID, Node: c.cfg.Node, Name: name}
	var err error
	for i := range c.clients {
		at := (first + i) % len(c.clients)
		var resp *connect.Response[workerpb.ResolveSecretResponse]
		resp, err = c.clients[at].ResolveSecret(ctx, connect.NewRequest(msg))
		if err == nil {
			c.keep(key, secretAnswer{value: resp.Msg.GetValue()}, at)
			return resp.Msg.GetValue(), nil
		}
		if !transportFailure(ctx, err) {
			break
		}
		c.log.Warn("control plane unreachable, trying the next", "url", c.cfg.URLs[at], "err", err)
	}
	err = fromWire(ctx, "resolve secret", err)
	if errdefs.ClassOf(err) == errdefs.ErrNotFound {
		c.keep(key, secretAnswer{missing: true}, first)
		return "", fmt.Errorf("secret %q: %w", name, errdefs.ErrNotFound)
	}
	return "", fmt.Errorf("secret %q: %w", name, err)
}

func (a secretAnswer) get(name string) (string, error) {
	if a.missing {
		return "", fmt.Errorf("secret %q: %w", name, errdefs.ErrNotFound)
	}
	return a.value, nil
}

// keep caches a for the TTL and makes URL at the first one tried.
func (c *ControlClient) keep(key secretKey, a secretAnswer, at int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next = at
	if c.cfg.SecretTTL < 0 {
		return
	}
	now := time.Now()
	if len(c.cached) >= maxCachedSecrets {
		for k, v := range c.cached {
			if !now.Before(v.expires) {
				delete(c.cached, k)
			}
		}
		if len(c.cached) >= maxCachedSecrets {
			clear(c.cached)
		}
	}
	a.expires = now.Add(c.cfg.SecretTTL)
	c.cached[key] = a
}
