package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/workerpb/workerpbconnect"
)

// MaxMessageBytes bounds one message of the protocol either way (a file or
// tar chunk is at most chunkBytes; an event's data at most
// agentproto.MaxEventData; the rest are lists and specs).
const MaxMessageBytes = 16 << 20

// chunkBytes is how much of a file or tar stream one message carries.
const chunkBytes = 256 << 10

// ServerConfig is what a Server serves and how it checks its callers.
type ServerConfig struct {
	// Worker is the worker the protocol drives (the local worker in
	// `spaced worker`).
	Worker worker.Worker
	// Token is the internal token every call must carry (see LoadToken).
	Token  Token
	Logger *slog.Logger
	// Templates, when set, serves BuildTemplate (nil: refused as a
	// failed precondition).
	Templates TemplateBuilder
}

// Server serves the worker protocol over a worker.Worker. It is an
// http.Handler; HTTPServer wraps it in an http.Server that speaks HTTP/2,
// in clear (h2c) or over TLS.
type Server struct {
	w         worker.Worker
	templates TemplateBuilder
	token     Token
	log       *slog.Logger
	mux       *http.ServeMux
	refuse    *connect.ErrorWriter
	exits     *exitQueue
	closing   context.Context // done once Close is called: long streams end
	close     context.CancelFunc
}

// NewServer returns a Server over cfg.Worker; it starts taking the
// worker's exits at once (they wait for a watcher). Close it to end.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Worker == nil {
		return nil, errors.New("remote: ServerConfig.Worker is nil")
	}
	if err := cfg.Token.valid(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "worker-protocol")
	closing, cancel := context.WithCancel(context.Background())
	s := &Server{
		w: cfg.Worker, templates: cfg.Templates, token: cfg.Token, log: log, mux: http.NewServeMux(),
		refuse: connect.NewErrorWriter(), closing: closing, close: cancel,
	}
	s.exits = newExitQueue(cfg.Worker.Exits(), closing, log)
	opts := connect.WithHandlerOptions(
		connect.WithReadMaxBytes(MaxMessageBytes),
		connect.WithSendMaxBytes(MaxMessageBytes),
		connect.WithInterceptors(errorInterceptor{log: log}),
	)
	s.mux.Handle(workerpbconnect.NewWorkerServiceHandler(workerService{s}, opts))
	s.mux.Handle(workerpbconnect.NewGuestServiceHandler(guestService{s}, opts))
	return s, nil
}

// Close ends the server's own work: open streams end with
// errdefs.ErrUnavailable (a client resumes them elsewhere or later) and
// exits are no longer taken. It does not close the worker.
func (s *Server) Close() {
	s.close()
	s.exits.wait()
}

// ServeHTTP refuses a call without the right token before anything of it
// is read, then serves it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if reason := s.token.check(r.Header.Get("Authorization")); reason != "" {
		// The log says who and why, never the token it got.
		s.log.Warn("refused a worker protocol call", "reason", reason, "remote", r.RemoteAddr, "path", r.URL.Path)
		_ = s.refuse.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errors.New("unauthenticated")))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// HTTPServer returns an http.Server for s: HTTP/2 only (h2c on a plain
// listener, HTTP/2 over TLS when tlsConfig is set and used with
// ServeTLS), with bounded headers and pings that find a dead peer.
func (s *Server) HTTPServer(tlsConfig *tls.Config) *http.Server {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	protocols.SetHTTP2(true)
	return &http.Server{
		Handler:           s,
		Protocols:         &protocols,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		HTTP2:             http2Config(),
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// maxStreams bounds the calls open at once on one connection; a client
// that needs more opens another connection.
const maxStreams = 1000

// streamWindow is how much one call may have in flight unread, either way.
// A connection's window covers that for every stream it can carry, so a
// stream whose reader stalls (a port connection to a guest that reads
// nothing, or to a slow client) holds only its own window and never
// stalls the connection's other calls.
const streamWindow = 1 << 20

// http2Config is the HTTP/2 of both ends of the protocol.
func http2Config() *http.HTTP2Config {
	return &http.HTTP2Config{
		MaxConcurrentStreams:          maxStreams,
		MaxReceiveBufferPerStream:     streamWindow,
		MaxReceiveBufferPerConnection: maxStreams * streamWindow,
		MaxReadFrameSize:              1 << 20,
		SendPingTimeout:               15 * time.Second,
		PingTimeout:                   15 * time.Second,
	}
}

// errorInterceptor turns every handler error into its wire form (toWire).
type errorInterceptor struct{ log *slog.Logger }

func (e errorInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		return resp, toWire(e.log, req.Spec().Procedure, err)
	}
}

func (e errorInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (e errorInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return toWire(e.log, conn.Spec().Procedure, next(ctx, conn))
	}
}
