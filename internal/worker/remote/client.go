// Package remote is the worker protocol (proto/space/worker/v1, generated
// into internal/workerpb): a Server that serves any worker.Worker over
// Connect-RPC on HTTP/2, and a Client that is a worker.Worker itself, its
// Agent a worker.Guest whose calls go over the same connection. The
// control plane of a cluster drives a `spaced worker` on another host
// through the Client as the single-node server drives its local worker.
//
// Every call carries an internal token, checked in constant time before
// anything of the call is read; errors keep their errdefs class and public
// message across the wire and nothing else of their cause; deadlines
// travel with each call; event streams resume after a broken link from the
// last event they delivered, as the local agent link does.
//
// It knows nothing of the API, the store or operations, and nothing of how
// the worker it serves runs its sandboxes.
package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/workerpb/workerpbconnect"
)

// ClientConfig says where a worker listens and how to reach it.
type ClientConfig struct {
	// Address is the worker's protocol address: "host:port", or a URL
	// (http:// for h2c, https:// for TLS).
	Address string
	Token   Token
	// TLS, when set, is used for https:// (and makes a bare host:port
	// https).
	TLS    *tls.Config
	Logger *slog.Logger
}

// Client is a worker.Worker on the other end of the worker protocol.
type Client struct {
	log     *slog.Logger
	http    *http.Client
	workers workerpbconnect.WorkerServiceClient
	guests  workerpbconnect.GuestServiceClient
	// ports is guests without gzip: a port connection's bytes are the
	// guest's own (often compressed already) and gzip cost most of a
	// relay's CPU.
	ports workerpbconnect.GuestServiceClient

	exitsOnce sync.Once
	exits     chan worker.Exit
	closing   context.Context
	close     context.CancelFunc
	watching  sync.WaitGroup
}

var _ worker.Worker = (*Client)(nil)

// NewClient returns a client of the worker at cfg.Address. It does not
// connect until the first call.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.Token.valid(); err != nil {
		return nil, err
	}
	base, err := baseURL(cfg.Address, cfg.TLS != nil)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var protocols http.Protocols
	if strings.HasPrefix(base, "https://") {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	transport := &http.Transport{
		Protocols:           &protocols,
		TLSClientConfig:     cfg.TLS,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		HTTP2:               http2Config(),
	}
	hc := &http.Client{Transport: transport}
	opts := connect.WithClientOptions(
		connect.WithReadMaxBytes(MaxMessageBytes),
		connect.WithSendMaxBytes(MaxMessageBytes),
		connect.WithInterceptors(tokenInterceptor{header: cfg.Token.header()}),
	)
	closing, cancel := context.WithCancel(context.Background())
	return &Client{
		log: log.With("component", "worker-protocol", "worker", base), http: hc,
		workers: workerpbconnect.NewWorkerServiceClient(hc, base, opts),
		guests:  workerpbconnect.NewGuestServiceClient(hc, base, opts),
		ports:   workerpbconnect.NewGuestServiceClient(hc, base, opts, connect.WithAcceptCompression("gzip", nil, nil)),
		exits:   make(chan worker.Exit), closing: closing, close: cancel,
	}, nil
}

func baseURL(addr string, useTLS bool) (string, error) {
	if addr == "" {
		return "", errors.New("remote: no worker address")
	}
	if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		return strings.TrimSuffix(addr, "/"), nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("remote: worker address %q: %w", addr, err)
	}
	if useTLS {
		return "https://" + addr, nil
	}
	return "http://" + addr, nil
}

// Close stops watching exits and drops idle connections; the worker and
// its sandboxes are not touched.
func (c *Client) Close() error {
	c.close()
	c.watching.Wait()
	c.http.CloseIdleConnections()
	return nil
}

// tokenInterceptor adds the token to every call.
type tokenInterceptor struct{ header string }

func (t tokenInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", t.header)
		return next(ctx, req)
	}
}

func (t tokenInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", t.header)
		return conn
	}
}

func (t tokenInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// call runs one unary call and classes its error; an idempotent call
// whose link failed before the server answered is tried once more.
func call[Req, Resp any](ctx context.Context, what string, idempotent bool,
	fn func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error), msg *Req) (*Resp, error) {
	for attempt := 0; ; attempt++ {
		resp, err := fn(ctx, connect.NewRequest(msg))
		if err == nil {
			return resp.Msg, nil
		}
		if idempotent && attempt == 0 && transportFailure(ctx, err) {
			continue
		}
		return nil, fromWire(ctx, what, err)
	}
}
