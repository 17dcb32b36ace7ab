package server

import (
	"context"
	"log/slog"

	"github.com/space-sandbox/space/internal/worker/local"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// workerSecretLookup is how a cluster worker's egress proxy resolves
// ${secret:NAME}: it asks the control plane at --control (ResolveSecret,
// under the worker token, naming this worker's node), which answers with
// the value of the sandbox's tenant's secret when the sandbox's Pod is
// bound to this node; answers are kept remote.DefaultSecretTTL. Nil (no
// secret resolves, as before) without --control or without node
// registration: the control plane answers only for a node.
func workerSecretLookup(cfg WorkerConfig, token remote.Token, log *slog.Logger) (local.SandboxSecretLookup, func(), error) {
	urls := cfg.Node.controlURLs()
	if len(urls) == 0 || cfg.Node.Kubeconfig == "" {
		if len(urls) > 0 {
			log.Warn("--control without --kubeconfig: tenants' secrets do not resolve here (the control plane answers for nodes only)")
		}
		return nil, func() {}, nil
	}
	tlsConfig, err := controlClientTLS(cfg.Node)
	if err != nil {
		return nil, nil, err
	}
	cc, err := remote.NewControlClient(remote.ControlClientConfig{URLs: urls, Token: token, Node: cfg.Node.NodeName,
		TLS: tlsConfig, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	log.Info("tenants' secrets resolve through the control plane", "control", urls, "ttl", remote.DefaultSecretTTL)
	return func(ctx context.Context, sandboxID, name string) (string, error) {
		return cc.Secret(ctx, sandboxID, name)
	}, cc.Close, nil
}
