package remote

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/workerpb"
	"github.com/space-sandbox/space/internal/workerpb/workerpbconnect"
)

// SecretQuery is one ResolveSecret call, as the control plane's resolver
// gets it: what the worker asks for and where the call came from.
type SecretQuery struct {
	// SandboxID is the sandbox whose egress policy references the secret.
	SandboxID string
	// Node is the node the calling worker says it is.
	Node string
	// Name is the secret's name.
	Name string
	// Peer is the address the call came from, as the control plane's
	// listener saw it (invalid when it cannot be parsed).
	Peer netip.Addr
}

// SecretSource answers ResolveSecret calls. Its errors must name no value;
// a refusal reads errdefs.ErrNotFound whatever its reason (the caller
// learns nothing of other tenants' sandboxes or secrets), a failure to
// answer now errdefs.ErrUnavailable.
type SecretSource interface {
	ResolveSecret(ctx context.Context, q SecretQuery) (string, error)
}

// ControlServerConfig is what a ControlServer serves.
type ControlServerConfig struct {
	// Token is the worker protocol's token: workers send it with every
	// call, as the control plane does to them.
	Token   Token
	Secrets SecretSource
	Logger  *slog.Logger
}

// ControlServer serves ControlService, the calls a worker makes to the
// control plane. It is an http.Handler for the paths under Prefix, to be
// mounted beside (never behind) the public API, whose keys it does not
// take: a call without the worker token is refused before it is read.
type ControlServer struct {
	token  Token
	log    *slog.Logger
	mux    *http.ServeMux
	refuse *connect.ErrorWriter
}

// ControlPrefix is the path prefix of ControlService's calls.
const ControlPrefix = "/" + workerpbconnect.ControlServiceName + "/"

// NewControlServer returns a ControlServer over cfg.
func NewControlServer(cfg ControlServerConfig) (*ControlServer, error) {
	if cfg.Secrets == nil {
		return nil, errors.New("remote: ControlServerConfig.Secrets is nil")
	}
	if err := cfg.Token.valid(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "control-protocol")
	s := &ControlServer{token: cfg.Token, log: log, mux: http.NewServeMux(), refuse: connect.NewErrorWriter()}
	opts := connect.WithHandlerOptions(
		connect.WithReadMaxBytes(64<<10),
		connect.WithSendMaxBytes(1<<20),
		connect.WithInterceptors(errorInterceptor{log: log}),
	)
	s.mux.Handle(workerpbconnect.NewControlServiceHandler(controlService{src: cfg.Secrets, log: log}, opts))
	return s, nil
}

// ServeHTTP refuses a call without the right token before anything of it
// is read, then serves it.
func (s *ControlServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if reason := s.token.check(r.Header.Get("Authorization")); reason != "" {
		s.log.Warn("refused a control protocol call", "reason", reason, "remote", r.RemoteAddr, "path", r.URL.Path)
		_ = s.refuse.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errors.New("unauthenticated")))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Mount returns next with s serving the paths under ControlPrefix.
func (s *ControlServer) Mount(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, ControlPrefix) {
			s.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

type controlService struct {
	src SecretSource
	log *slog.Logger
}

// maxIDBytes bounds the ids and names of a ResolveSecret call.
const maxIDBytes = 253

func (h controlService) ResolveSecret(ctx context.Context, req *connect.Request[workerpb.ResolveSecretRequest]) (*connect.Response[workerpb.ResolveSecretResponse], error) {
	q := SecretQuery{SandboxID: req.Msg.GetSandboxId(), Node: req.Msg.GetNode(), Name: req.Msg.GetName(), Peer: peerAddr(req.Peer().Addr)}
	for what, v := range map[string]string{"sandbox_id": q.SandboxID, "node": q.Node, "name": q.Name} {
		if v == "" || len(v) > maxIDBytes {
			return nil, errdefs.New(errdefs.ErrInvalidArgument, "%s must be 1-%d bytes", what, maxIDBytes)
		}
	}
	v, err := h.src.ResolveSecret(ctx, q)
	if err != nil {
		// Who asked for what and why not; never a value (there is none).
		h.log.Info("secret not resolved for a worker", "sandbox", q.SandboxID, "node", q.Node, "secret", q.Name,
			"peer", q.Peer.String(), "err", err, "why", causeOf(err))
		return nil, err
	}
	return reply(&workerpb.ResolveSecretResponse{Value: v}), nil
}

// peerAddr is the IP of a "host:port" peer address (invalid when it has none).
func peerAddr(addr string) netip.Addr {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// causeOf is the internal cause of a public error, for the log ("" when
// it has none).
func causeOf(err error) string {
	var pub *errdefs.Public
	if errors.As(err, &pub) && pub.Cause != nil {
		return pub.Cause.Error()
	}
	return ""
}
