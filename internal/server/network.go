package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"time"

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
// first start) and starts the namespace pool and the egress service. close
// stops them (after the worker is closed: sandboxes keep their namespaces).
func startNetwork(ctx context.Context, dataDir string, db store.Store, log *slog.Logger) (netParts, func(), error) {
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
	mgr := network.New(ctx, network.Config{Logger: log.With("component", "network"), Instance: dataDir})
	eg := egress.New(egress.Config{
		Logger: log.With("component", "egress"),
		// Never reachable whatever a policy says, on top of loopback,
		// link-local, multicast and this host's own addresses.
		Forbidden: []netip.Prefix{network.GuestPrefix},
	})
	closeAll := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = eg.Close(cctx)
		_ = mgr.Close(cctx)
	}
	return netParts{secrets: sec, netns: mgr, egress: eg}, closeAll, nil
}
