package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/api"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/budget"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local"
)

// Run starts the single-node spaced (control plane and local worker in one
// process) and serves until ctx ends. Start-up fails with one clear error
// naming what is missing; it never hangs on a missing part.
func Run(ctx context.Context, cfg Config, log *slog.Logger) (err error) {
	var td teardown
	defer td.run()
	if err := startDebug(cfg.DebugListen, &td, log); err != nil {
		return err
	}
	var h *host
	base := simulatedBase()
	if cfg.Simulate.Enabled {
		if err := ensureDataDir(cfg); err != nil {
			return err
		}
	} else {
		if h, err = prepareHost(ctx, cfg, "spaced", &td, log); err != nil {
			return err
		}
		base = h.base
	}

	// Control plane: store, auth, operations, API.
	db, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	td.add(func() { db.Close() })
	if err := registerTemplate(ctx, db, base); err != nil {
		return err
	}
	authn := auth.New(db, log)
	keyPath, created, err := authn.EnsureAdmin(ctx, cfg.DataDir)
	if err != nil {
		return fmt.Errorf("admin key: %w", err)
	}
	if !created { // a new key is logged where it is written
		log.Info("admin API key", "path", keyPath)
	}

	// One set of per-sandbox budget series (space_guest_budget_*) for
	// every host-side reader of guest data, served with the API's.
	metrics := api.NewMetrics()
	var wk worker.Worker
	var nets netParts
	templatesDir := filepath.Join(cfg.DataDir, "templates")
	if cfg.Simulate.Enabled {
		if nets, err = simulatedNode(ctx, cfg, db, log); err != nil {
			return err
		}
		sw := startSimulated(cfg.Simulate, "spaced", log)
		td.add(func() { sw.Close() })
		wk = sw
	} else {
		if wk, nets, err = startLocalWorker(ctx, cfg, h, db, metrics, &td, log); err != nil {
			return err
		}
		templatesDir = h.templatesDir
	}
	tpls, err := templateBuilders(cfg, templatesDir, log)
	if err != nil {
		return err
	}
	srv, svc, ops, err := startAPI(cfg, apiParts{db: db, auth: authn, worker: wk, metrics: metrics, secrets: nets.secrets,
		templates: tpls, owner: operationOwner(cfg)}, &td, log)
	if err != nil {
		return err
	}

	// Recovery: every interrupted operation ends, then the store and the
	// worker are made to agree, before the first request is served.
	aborted, err := ops.Recover(ctx)
	if err != nil {
		return fmt.Errorf("recover operations: %w", err)
	}
	if len(aborted) > 0 {
		log.Warn("ended operations interrupted by a restart", "count", len(aborted))
	}
	if err := srv.Reconcile(ctx); err != nil {
		return fmt.Errorf("reconcile sandboxes: %w", err)
	}
	if err := srv.ReconcileTemplates(ctx); err != nil {
		return fmt.Errorf("reconcile templates: %w", err)
	}

	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	go srv.Run(bg)
	return serveAPI(ctx, cfg, srv, svc, authn, db, log, func(addr string) {
		kernel := "none (simulated)"
		if h != nil {
			kernel = h.kernel.Version
		}
		log.Info("spaced serving", "listen", addr, "data_dir", cfg.DataDir,
			"kernel", kernel, "features", strings.Join(cfg.Features, ","), "simulated", cfg.Simulate.Enabled,
			"operation_concurrency", cfg.OperationConcurrency, "operation_tenant_share", cfg.OperationTenantShare)
	})
}

// startLocalWorker starts the sandbox network and the local worker on a
// prepared host; td stops them.
func startLocalWorker(ctx context.Context, cfg Config, h *host, db store.Store, metrics *api.Metrics, td *teardown,
	log *slog.Logger) (worker.Worker, netParts, error) {
	budgets := budget.NewMetrics(metrics.Registry)
	nets, closeNet, err := startNetwork(ctx, cfg, db, budgets, log)
	if err != nil {
		return nil, netParts{}, err
	}
	td.add(closeNet)
	wk, err := local.New(ctx, local.Config{
		Storage: h.storage, Driver: h.driver, Kernel: h.kernelImage, Initrd: h.initrd.Path,
		TemplatesDir: h.templatesDir, BootTimeout: cfg.BootTimeout,
		ObserveBoot: func(d time.Duration) { metrics.BootDuration.Observe(d.Seconds()) },
		// A link dropped for abuse holds nothing to count at once: the
		// budget series count it as exhausted{budget="agent_link"}.
		ObserveLinkAbuse: budget.New("agent_link", 0, budgets).Exhausted,
		PortConnections:  budget.New(agentclient.PortBudget, agentclient.MaxPortConnections, budgets),
		Logger:           log,
		Network:          nets.netns, Egress: nets.egress, Secrets: nets.secrets.Resolve,
		PoolSize:     workerPoolSize(cfg.PoolSize),
		WakePoolSize: workerPoolSize(cfg.WakePoolSize), WakePoolMemoryMiB: cfg.WakePoolMemoryMiB,
	})
	if err != nil {
		return nil, netParts{}, err
	}
	metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "space", Name: "pool_ready",
		Help: "Restored, warmed VMs ready to be taken by a create (all templates).",
	}, func() float64 { return float64(wk.PoolStats().Ready) }))
	td.add(func() {
		h.keepVolume = vmsLeftRunning(ctx, wk, log)
		wk.Close()
	})
	return wk, nets, nil
}

// workerPoolSize maps --pool-size (0 disables) to local.Config.PoolSize
// (0 is the default there, negative disables).
func workerPoolSize(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// templateBuilders makes the API's template builders. Path sources must lie
// under <data-dir>/imports or a --template-source-root; setup scripts run
// only in admins' builds (they run as root on this host).
func templateBuilders(cfg Config, templatesDir string, log *slog.Logger) (sandbox.TemplateDeps, error) {
	imports := filepath.Join(cfg.DataDir, "imports")
	if err := os.MkdirAll(imports, 0o755); err != nil {
		return sandbox.TemplateDeps{}, fmt.Errorf("template imports dir: %w", err)
	}
	bc := template.BuilderConfig{TemplatesDir: templatesDir, AgentBinary: cfg.AgentBinary,
		SourceRoots: append([]string{imports}, cfg.TemplateSourceRoots...), RegistryAllow: cfg.TemplateRegistryAllow, Logger: log}
	tenants, err := template.NewBuilder(bc)
	if err != nil {
		return sandbox.TemplateDeps{}, err
	}
	bc.AllowScripts = true
	admins, err := template.NewBuilder(bc)
	if err != nil {
		return sandbox.TemplateDeps{}, err
	}
	return sandbox.TemplateDeps{Builder: tenants, AdminBuilder: admins, LogDir: filepath.Join(cfg.DataDir, "template-logs"),
		TemplatesDir: templatesDir}, nil
}

// registerTemplate records a built template image in the store.
func registerTemplate(ctx context.Context, db store.Store, m template.Metadata) error {
	existing, err := db.GetTemplateByName(ctx, m.Name, m.Digest)
	if err == nil && existing.State == store.TemplateReady {
		return nil
	}
	defaults, err := json.Marshal(m.Defaults)
	if err != nil {
		return err
	}
	t := &store.Template{ID: store.NewID("tpl"), Name: m.Name, Digest: m.Digest, State: store.TemplateReady,
		SizeBytes: m.SizeBytes, Defaults: defaults, CreatedAt: m.CreatedAt}
	if existing != nil {
		t.ID = existing.ID
	}
	return db.UpsertTemplate(ctx, t)
}
