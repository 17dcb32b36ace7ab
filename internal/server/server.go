package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/space-sandbox/space/internal/api"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/e2b"
	"github.com/space-sandbox/space/internal/guest"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/storage"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker/local"
)

// Run starts spaced and serves until ctx ends. Start-up fails with one clear
// error naming what is missing; it never hangs on a missing part.
func Run(ctx context.Context, cfg Config, log *slog.Logger) (err error) {
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	if os.Geteuid() != 0 {
		return errors.New("spaced must run as root (it creates loop mounts, VMs and network namespaces)")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}

	// Host: reflink storage, kernel, agent, VMM.
	st, err := storage.Open(ctx, storage.Config{DataDir: cfg.DataDir}, log)
	if err != nil {
		return err
	}
	// Unmounted last, after everything that uses it has closed; kept when
	// sandbox VMs run on (decided as the worker closes).
	keepVolume := false
	closers = append(closers, func() { releaseVolume(ctx, st, keepVolume, log) })
	kernel, err := guest.Locate(cfg.KernelDir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(cfg.AgentBinary); err != nil {
		return fmt.Errorf("guest agent binary %s not found: build it with `make build` or pass --agent-binary", cfg.AgentBinary)
	}
	initrd, err := guest.BuildInitramfs(ctx, kernel, guest.InitramfsOptions{
		AgentBinary: cfg.AgentBinary, CacheDir: filepath.Join(cfg.DataDir, "boot"), Logger: log,
	})
	if err != nil {
		return err
	}
	templatesDir := filepath.Join(st.Root(), "templates")
	base, err := template.BuildBase(ctx, template.BaseOptions{
		TemplatesDir: templatesDir, AgentBinary: cfg.AgentBinary, Logger: log,
	})
	if err != nil {
		return fmt.Errorf("build base template: %w", err)
	}
	// A host that cannot run the VMM is one clear error now, not a failed create later.
	driver, kernelImage, err := openVMM(ctx, cfg, kernel, log)
	if err != nil {
		return err
	}

	// Control plane: store, auth, operations, API.
	db, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	closers = append(closers, func() { db.Close() })
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

	nets, closeNet, err := startNetwork(ctx, cfg, db, log)
	if err != nil {
		return err
	}
	closers = append(closers, closeNet)

	metrics := api.NewMetrics()
	wk, err := local.New(ctx, local.Config{
		Storage: st, Driver: driver, Kernel: kernelImage, Initrd: initrd.Path,
		TemplatesDir: templatesDir, BootTimeout: cfg.BootTimeout,
		ObserveBoot: func(d time.Duration) { metrics.BootDuration.Observe(d.Seconds()) },
		Logger:      log,
		Network:     nets.netns, Egress: nets.egress, Secrets: nets.secrets.Resolve,
		PoolSize: workerPoolSize(cfg.PoolSize),
	})
	if err != nil {
		return err
	}
	metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "space", Name: "pool_ready",
		Help: "Restored, warmed VMs ready to be taken by a create (all templates).",
	}, func() float64 { return float64(wk.PoolStats().Ready) }))
	closers = append(closers, func() {
		keepVolume = vmsLeftRunning(ctx, wk, log)
		wk.Close()
	})
	ops := operation.New(operation.Config{Store: db, Logger: log, Registerer: metrics.Registry, Owner: operationOwner(cfg)})
	closers = append(closers, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ops.Close(cctx)
	})
	tpls, err := templateBuilders(cfg, templatesDir, log)
	if err != nil {
		return err
	}
	srv, err := api.New(api.Config{Features: cfg.Features, DefaultQuota: cfg.DefaultQuota}, api.Deps{
		Store: db, Ops: ops, Auth: authn, Worker: wk, Logger: log, Metrics: metrics, Secrets: nets.secrets,
		Templates: tpls,
	})
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

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	hs := srv.HTTPServer(slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	// The E2B-compatible API shares the listener; it passes /v1 through.
	hs.Handler = e2b.New(e2b.Config{RefuseInternet: cfg.E2BRefuseInternet}, hs.Handler, db, log)
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	go srv.Run(bg)
	log.Info("spaced serving", "listen", ln.Addr().String(), "data_dir", cfg.DataDir,
		"kernel", kernel.Version, "features", strings.Join(cfg.Features, ","))

	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(srv.Listener(limitPerClient(ln, cfg.MaxConnsPerClient, log))) }()
	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close() // streams still open after the grace period are cut
	}
	return nil
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
func templateBuilders(cfg Config, templatesDir string, log *slog.Logger) (api.TemplateDeps, error) {
	imports := filepath.Join(cfg.DataDir, "imports")
	if err := os.MkdirAll(imports, 0o755); err != nil {
		return api.TemplateDeps{}, fmt.Errorf("template imports dir: %w", err)
	}
	bc := template.BuilderConfig{TemplatesDir: templatesDir, AgentBinary: cfg.AgentBinary,
		SourceRoots: append([]string{imports}, cfg.TemplateSourceRoots...), RegistryAllow: cfg.TemplateRegistryAllow, Logger: log}
	tenants, err := template.NewBuilder(bc)
	if err != nil {
		return api.TemplateDeps{}, err
	}
	bc.AllowScripts = true
	admins, err := template.NewBuilder(bc)
	if err != nil {
		return api.TemplateDeps{}, err
	}
	return api.TemplateDeps{Builder: tenants, AdminBuilder: admins, LogDir: filepath.Join(cfg.DataDir, "template-logs")}, nil
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
