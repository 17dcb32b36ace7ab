package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/secrets"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// workerSecrets answers the ResolveSecret calls of cluster workers: the
// egress proxy of a sandbox on a worker asks for a secret its policy
// references, and gets the value of that sandbox's tenant's secret only.
//
// What a call must show: the worker token (checked by remote's
// ControlServer), a sandbox whose Pod Kubernetes has bound to the node
// the call names, and a source address that is that node's advertised
// worker address. The tenant comes from the store's sandbox row, never
// from the worker. Every refusal reads not_found, whatever its reason.
//
// The residual trust (docs/ARCHITECTURE.md): the token is shared by all
// workers, so the node a call names is proven by its source address
// only. Whoever holds the token and can send from a node's address (that
// node's worker, or anything else on that host or able to use its IP)
// gets the secrets of the sandboxes bound to that node, which that
// worker's egress proxy holds anyway while it injects them; never those of
// sandboxes on other nodes, nor secrets that no sandbox there references
// by tenant.
type workerSecrets struct {
	db      store.Store
	secrets *secrets.Service // nil: no secret resolves
	fleet   worker.Fleet
	log     *slog.Logger
}

var _ remote.SecretSource = (*workerSecrets)(nil)

// ResolveSecret implements remote.SecretSource.
func (s *workerSecrets) ResolveSecret(ctx context.Context, q remote.SecretQuery) (string, error) {
	refuse := func(why string, args ...any) error {
		return errdefs.New(errdefs.ErrNotFound, "secret %q does not resolve for sandbox %s", q.Name, q.SandboxID).
			WithCause(fmt.Errorf(why, args...))
	}
	if s.secrets == nil {
		return "", refuse("this control plane keeps no secrets (no --secrets-key-file)")
	}
	host := s.fleet.HostOf(q.SandboxID)
	if host == "" || host != q.Node {
		return "", refuse("the sandbox is bound to node %q, not to the caller's %q", host, q.Node)
	}
	if err := s.fromNode(ctx, q); err != nil {
		return "", refuse("%v", err)
	}
	sb, err := s.db.GetSandbox(ctx, store.AnyTenant, q.SandboxID)
	if errdefs.ClassOf(err) == errdefs.ErrNotFound {
		return "", refuse("no such sandbox in the store")
	}
	if err != nil {
		return "", errdefs.New(errdefs.ErrUnavailable, "the control plane cannot look the sandbox up now").WithCause(err)
	}
	v, err := s.secrets.Resolve(ctx, sb.TenantID, q.Name)
	if err == nil {
		return v, nil
	}
	switch errdefs.ClassOf(err) {
	case errdefs.ErrNotFound:
		return "", refuse("the sandbox's tenant %s has no such secret", sb.TenantID)
	case errdefs.ErrDataLoss:
		// The value cannot be opened: as good as absent for the proxy,
		// and said plainly in the control plane's log.
		s.log.ErrorContext(ctx, "a tenant's secret cannot be opened", "tenant", sb.TenantID, "secret", q.Name, "err", err)
		return "", refuse("the sealed value cannot be opened")
	default:
		return "", errdefs.New(errdefs.ErrUnavailable, "the control plane cannot read the secret now").WithCause(err)
	}
}

// fromNode checks that the call came from the address node q.Node
// advertises (its InternalIP): loopback matches loopback, for workers on
// the control plane's own host.
func (s *workerSecrets) fromNode(ctx context.Context, q remote.SecretQuery) error {
	hosts, err := s.fleet.Hosts(ctx)
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	for _, h := range hosts {
		if h.Name != q.Node {
			continue
		}
		host, _, err := net.SplitHostPort(h.Address)
		if err != nil {
			return fmt.Errorf("node %s advertises no worker address", h.Name)
		}
		want, err := netip.ParseAddr(host)
		if err != nil {
			return fmt.Errorf("node %s advertises %q, not an IP", h.Name, host)
		}
		want = want.Unmap()
		if q.Peer == want || (q.Peer.IsLoopback() && want.IsLoopback()) {
			return nil
		}
		return fmt.Errorf("the call came from %s, node %s is at %s", q.Peer, h.Name, want)
	}
	return fmt.Errorf("no node %s", q.Node)
}

// mountWorkerSecrets serves ControlService beside the public API: the
// worker token, not an API key, authenticates its calls.
func mountWorkerSecrets(cfg ControlConfig, db store.Store, sec *secrets.Service, fleet worker.Fleet,
	log *slog.Logger) (func(http.Handler) http.Handler, error) {
	token, err := remote.LoadToken(cfg.WorkerTokenFile)
	if err != nil {
		return nil, fmt.Errorf("--worker-token-file: %w", err)
	}
	cs, err := remote.NewControlServer(remote.ControlServerConfig{Token: token, Logger: log,
		Secrets: &workerSecrets{db: db, secrets: sec, fleet: fleet, log: log.With("component", "worker-secrets")}})
	if err != nil {
		return nil, err
	}
	return cs.Mount, nil
}
