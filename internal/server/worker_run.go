package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/api"
	"github.com/space-sandbox/space/internal/budget"
	"github.com/space-sandbox/space/internal/egress"
	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// RunWorker runs `spaced worker`: this host's local worker behind the
// worker protocol on cfg.Listen, until ctx ends. Start-up checks are the
// single-node server's (root, storage, kernel, agent, VMM); there is no
// store, API or operation engine here: the control plane that calls in
// owns those. Tenants' secrets live in the control plane's store: the
// egress proxy resolves policies' ${secret:NAME} through --control
// (worker_secrets.go).
func RunWorker(ctx context.Context, cfg WorkerConfig, log *slog.Logger) (err error) {
	var td teardown
	defer td.run()
	if cfg.Simulate.Enabled {
		return runSimulatedWorker(ctx, cfg, log)
	}
	if err := requireRoot("spaced worker"); err != nil {
		return err
	}
	if err := startDebug(cfg.DebugListen, &td, log); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	token, tlsConfig, err := workerCredentials(cfg, log)
	if err != nil {
		return err
	}
	h, err := prepareHost(ctx, cfg.Config, "spaced worker", &td, log)
	if err != nil {
		return err
	}
	netns, eg, closeNet, err := startWorkerNetwork(ctx, cfg.Config, log)
	if err != nil {
		return err
	}
	td.add(closeNet)
	sandboxSecrets, closeSecrets, err := workerSecretLookup(cfg, token, log)
	if err != nil {
		return err
	}
	td.add(closeSecrets)
	snapshots, closeSnapshots, err := openWorkerSnapshots(ctx, cfg.ObjectStore, h.storage.Root(), log)
	if err != nil {
		return err
	}
	td.add(closeSnapshots)
	wk, err := local.New(ctx, local.Config{
		Storage: h.storage, Driver: h.driver, Kernel: h.kernelImage, Initrd: h.initrd.Path,
		TemplatesDir: h.templatesDir, BootTimeout: cfg.BootTimeout, Logger: log,
		Network: netns, Egress: eg, PoolSize: workerPoolSize(cfg.PoolSize),
		WakePoolSize: workerPoolSize(cfg.WakePoolSize), WakePoolMemoryMiB: cfg.WakePoolMemoryMiB,
		Snapshots: snapshots, SandboxSecrets: sandboxSecrets,
		// One port-connection budget per sandbox across its clients, as
		// on the single node (a worker serves no metrics of its own yet).
		PortConnections: budget.New(agentclient.PortBudget, agentclient.MaxPortConnections, nil),
	})
	if err != nil {
		return err
	}
	td.add(func() {
		h.keepVolume = vmsLeftRunning(ctx, wk, log)
		wk.Close()
	})
	builds, err := newWorkerTemplates(cfg, h, snapshots, log)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	log.Info("spaced worker serving the worker protocol", "listen", ln.Addr().String(), "data_dir", cfg.DataDir,
		"kernel", h.kernel.Version, "tls", tlsConfig != nil)
	serving := WorkerServing{Token: token, TLS: tlsConfig, Logger: log}
	if builds != nil {
		serving.Templates = builds
	}
	return serveWorkerAndNode(ctx, wk, ln, serving, cfg.Node)
}

// runSimulatedWorker is RunWorker with --simulate: the simulated worker
// behind the same protocol and node registration, and no host set-up
// (root, storage, kernel, VMM, network, object store).
func runSimulatedWorker(ctx context.Context, cfg WorkerConfig, log *slog.Logger) error {
	var td teardown
	defer td.run()
	if err := startDebug(cfg.DebugListen, &td, log); err != nil {
		return err
	}
	if err := ensureDataDir(cfg.Config); err != nil {
		return err
	}
	token, tlsConfig, err := workerCredentials(cfg, log)
	if err != nil {
		return err
	}
	wk := startSimulated(cfg.Simulate, "spaced worker", log)
	td.add(func() { wk.Close() })
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	log.Info("spaced worker serving the worker protocol", "listen", ln.Addr().String(), "data_dir", cfg.DataDir,
		"kernel", "none (simulated)", "tls", tlsConfig != nil, "simulated", true)
	cfg.Node.Simulated = true
	return serveWorkerAndNode(ctx, wk, ln, WorkerServing{Token: token, TLS: tlsConfig, Logger: log, Templates: simulatedBuilds{}}, cfg.Node)
}

// workerCredentials are what the worker protocol's server authenticates
// with: its token (made on first start) and its TLS configuration (nil:
// h2c).
func workerCredentials(cfg WorkerConfig, log *slog.Logger) (remote.Token, *tls.Config, error) {
	token, created, err := remote.EnsureToken(cfg.TokenFile)
	if err != nil {
		return token, nil, err
	}
	if created {
		log.Info("worker protocol token created", "path", cfg.TokenFile)
	}
	tlsConfig, err := WorkerServerTLS(cfg)
	return token, tlsConfig, err
}

// WorkerServing is how ServeWorker serves a worker.
type WorkerServing struct {
	Token  remote.Token
	TLS    *tls.Config // nil: h2c
	Logger *slog.Logger
	// Templates serves BuildTemplate (nil: refused).
	Templates remote.TemplateBuilder
}

// ServeWorker serves the worker protocol for w on ln until ctx ends, then
// ends open streams and shuts down (w stays open: its owner closes it).
// It is the one place `spaced worker` wires the protocol, so what a
// cluster adds beside it (registering the host as a node) goes here too.
func ServeWorker(ctx context.Context, w worker.Worker, ln net.Listener, opts WorkerServing) error {
	srv, err := remote.NewServer(remote.ServerConfig{Worker: w, Token: opts.Token, Logger: opts.Logger, Templates: opts.Templates})
	if err != nil {
		ln.Close()
		return err
	}
	hs := srv.HTTPServer(opts.TLS)
	errc := make(chan error, 1)
	go func() {
		if opts.TLS != nil {
			errc <- hs.ServeTLS(ln, "", "")
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		srv.Close()
		return fmt.Errorf("worker protocol: %w", err)
	case <-ctx.Done():
	}
	srv.Close() // long streams end now (clients resume them), so Shutdown need not wait
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("worker protocol: %w", err)
	}
	return nil
}

// startWorkerNetwork starts the namespace pool and the egress service as
// the single-node server does; tenants' secrets come from the control
// plane (workerSecretLookup), not a store. close stops them, after the
// worker is closed.
func startWorkerNetwork(ctx context.Context, cfg Config, log *slog.Logger) (*network.Manager, *egress.Service, func(), error) {
	roots, err := upstreamRoots(cfg.EgressCAFiles)
	if err != nil {
		return nil, nil, nil, err
	}
	var ca *egress.CA
	if slices.Contains(cfg.Features, api.FeatureEgressHTTPSInject) {
		if ca, err = egress.LoadOrCreateCA(cfg.DataDir); err != nil {
			return nil, nil, nil, err
		}
	}
	mgr := network.New(ctx, network.Config{Logger: log.With("component", "network"), Instance: cfg.DataDir})
	eg := egress.New(egressConfig(cfg, log, ca, roots))
	closeAll := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = eg.Close(cctx)
		_ = mgr.Close(cctx)
	}
	return mgr, eg, closeAll, nil
}
