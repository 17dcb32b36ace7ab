package server

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/space-sandbox/space/internal/api"
	"github.com/space-sandbox/space/internal/budget"
	"github.com/space-sandbox/space/internal/egress"
	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/secrets"
	"github.com/space-sandbox/space/internal/store"
)

// netParts are the pieces of sandbox networking spaced wires: tenants'
// secrets, the namespace manager and the egress service.
type netParts struct {
	secrets *secrets.Service
	netns   *network.Manager
	egress  *egress.Service
}

// startNetwork opens the secrets key (<data-dir>/secrets.key, created at
// first start) and starts the namespace pool and the egress service. With
// the egress_https_inject gate on it also opens the egress CA
// (<data-dir>/egress-ca.{crt,key}, created at first start). close stops
// them (after the worker is closed: sandboxes keep their namespaces).
func startNetwork(ctx context.Context, cfg Config, db store.Store, budgets *budget.Metrics, log *slog.Logger) (netParts, func(), error) {
	dataDir := cfg.DataDir
	key, err := secrets.LoadKey(filepath.Join(dataDir, secrets.KeyFile))
	if err != nil {
		return netParts{}, nil, fmt.Errorf("secrets key: %w", err)
	}
	sec, err := secrets.New(db, key, log.With("component", "secrets"))
	if err != nil {
		return netParts{}, nil, err
	}
	// The data dir names this server's namespaces, so two servers on one
	// host (or a test beside a server) never reap each other's.
	roots, err := upstreamRoots(cfg.EgressCAFiles)
	if err != nil {
		return netParts{}, nil, err
	}
	var ca *egress.CA
	if slices.Contains(cfg.Features, api.FeatureEgressHTTPSInject) {
		if ca, err = egress.LoadOrCreateCA(dataDir); err != nil {
			return netParts{}, nil, err
		}
		log.Info("HTTPS credential injection on: guests trust the egress CA",
			"cert", filepath.Join(dataDir, egress.CACertFile), "subject", ca.Certificate().Subject.CommonName)
	}
	mgr := network.New(ctx, network.Config{Logger: log.With("component", "network"), Instance: dataDir})
	ec := egressConfig(cfg, log, ca, roots)
	ec.Budgets = budgets
	eg := egress.New(ec)
	closeAll := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = eg.Close(cctx)
		_ = mgr.Close(cctx)
	}
	return netParts{secrets: sec, netns: mgr, egress: eg}, closeAll, nil
}

// egressConfig is the egress service's configuration on a VM host (single
// node or worker): never reachable whatever a policy says, on top of
// loopback, multicast and this host's own addresses, are the sandbox link
// network and the operator's --egress-deny; of the private ranges only
// --egress-allow-private is.
func egressConfig(cfg Config, log *slog.Logger, ca *egress.CA, roots *x509.CertPool) egress.Config {
	log = log.With("component", "egress")
	if len(cfg.EgressAllowPrivate) > 0 || len(cfg.EgressDeny) > 0 {
		log.Info("egress to private networks", "allowed", cfg.EgressAllowPrivate, "denied", cfg.EgressDeny)
	}
	return egress.Config{
		Logger:        log,
		Forbidden:     append([]netip.Prefix{network.GuestPrefix}, cfg.EgressDeny...),
		AllowPrivate:  cfg.EgressAllowPrivate,
		CA:            ca,
		UpstreamRoots: roots,
	}
}

// upstreamRoots is the system CA store plus the PEM certificates in files
// (nil without files: the proxy then uses the system store as is).
func upstreamRoots(files []string) (*x509.CertPool, error) {
	if len(files) == 0 {
		return nil, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--egress-ca-file: %w", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--egress-ca-file %s: no PEM certificate in it", f)
		}
	}
	return pool, nil
}
