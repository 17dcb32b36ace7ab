package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/api"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/cluster/leader"
	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/secrets"
	"github.com/space-sandbox/space/internal/store"
)

// RunControl runs `spaced control`, one replica of a cluster's control
// plane, and serves until ctx ends: the API, auth, operations and the
// sandbox service over the PostgreSQL store the replicas share, with
// internal/cluster/placement as the worker (a Pod per sandbox, calls
// forwarded to the owning node's worker over the worker protocol). It
// sets up no VMM, storage or network: those are the workers'. Every replica
// serves every request and handles the exits placement reports; the
// singleton loops (expiry, idle suspend, live reconcile) run on the replica
// holding the leader Lease; operations of a replica
// that stopped renewing their leases are taken over by the others.
func RunControl(ctx context.Context, cfg ControlConfig, log *slog.Logger) error {
	if err := cfg.check(); err != nil {
		return err
	}
	var td teardown
	defer td.run()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := startDebug(cfg.DebugListen, &td, log); err != nil {
		return err
	}
	identity := replicaIdentity()
	log = log.With("replica", identity)
	dial, err := workerDialer(cfg, log)
	if err != nil {
		return err
	}

	db, err := openStore(ctx, cfg.Config, log)
	if err != nil {
		return err
	}
	td.add(func() { db.Close() })
	authn := auth.New(db, log)
	if err := authn.RegisterAdminKey(ctx, cfg.AdminKeyFile); err != nil {
		return fmt.Errorf("--admin-key-file: %w", err)
	}
	sec, err := controlSecrets(cfg, db, log)
	if err != nil {
		return err
	}
	obj, err := openObjectStore(ctx, cfg, &td, log)
	if err != nil {
		return err
	}

	kube, err := kubeClient(cfg.Kubeconfig, cfg.KubeRate)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	pl, err := placement.New(pctx, kube, cfg.Drain.withDrain(placement.Config{Namespace: cfg.Namespace, ScheduleTimeout: cfg.ScheduleTimeout,
		TolerationSeconds: cfg.PodTolerationSeconds, Dial: dial, Snapshots: controlSnapshots(obj), Logger: log.With("component", "placement")}))
	cancel()
	if err != nil {
		return err
	}
	td.add(func() { pl.Close() })

	tpls, err := replicaTemplates(ctx, cfg, db, pl, dial, obj, &td, log)
	if err != nil {
		return err
	}
	// The engine may hand over operations before the API exists: they
	// wait for it (the first pass is LeaseTTL/3 after the start).
	var srvReady sync.WaitGroup
	srvReady.Add(1)
	var srv *api.Server
	takenOver := func(ctx context.Context, op *store.Operation) bool {
		srvReady.Wait()
		if srv == nil {
			return false
		}
		return srv.ReconcileTakenOver(ctx, op)
	}
	srv, svc, ops, err := startAPI(cfg.Config, apiParts{db: db, auth: authn, worker: pl, metrics: api.NewMetrics(), secrets: sec,
		templates: tpls, owner: identity, leaseTTL: cfg.OperationLeaseTTL, takenOver: takenOver,
		ready: func(ctx context.Context) error { return controlReady(ctx, db) }}, &td, log)
	if err != nil {
		srvReady.Done()
		return err
	}
	srvReady.Done()
	// Operations of replicas that died before this one started are taken
	// over now; those of live replicas stay theirs.
	ops.TakeOverExpired()
	runExits(ctx, srv, &td)

	if err := runLeaderLoops(ctx, cfg, kube, identity, srv, &td, log, objectGC(cfg.ObjectGC, obj, db, log)); err != nil {
		return err
	}
	workerRoutes, err := mountWorkerSecrets(cfg, db, sec, pl, log)
	if err != nil {
		return err
	}
	return serveAPI(ctx, cfg.Config, srv, svc, authn, db, log, func(addr string) {
		log.Info("spaced control serving", "listen", addr, "namespace", cfg.Namespace, "leader_lease", cfg.LeaderLease,
			"features", strings.Join(cfg.Features, ","), "operation_concurrency", cfg.OperationConcurrency, "operation_tenant_share", cfg.OperationTenantShare)
		if cfg.Serving != nil {
			cfg.Serving(addr)
		}
	}, workerRoutes)
}

// replicaIdentity names this replica in operation leases and the leader
// Lease: host, pid and a random part, so two replicas never share a name,
// not even a restarted one in the same Pod.
func replicaIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "spaced"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// controlSecrets opens the shared sealing key of tenants' secrets, or
// returns nil (secrets routes off) without --secrets-key-file.
func controlSecrets(cfg ControlConfig, db store.Store, log *slog.Logger) (*secrets.Service, error) {
	if cfg.SecretsKeyFile == "" {
		log.Warn("no --secrets-key-file: the secrets routes answer 503")
		return nil, nil
	}
	key, err := secrets.LoadKey(cfg.SecretsKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--secrets-key-file: %w", err)
	}
	return secrets.New(db, key, log.With("component", "secrets"))
}

// controlReady is /readyz of a replica: its store answers. Placement's
// informers are synced before the listener opens (placement.New waits),
// so a replica that serves at all sees the cluster.
func controlReady(ctx context.Context, db store.Store) error {
	if _, err := db.GetTenantByName(ctx, auth.AdminTenant); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// runExits handles placement's exits (worker lost, Pod failed, Pod deleted
// from outside) on this replica, leader or not, until td stops it: every
// replica sees every exit and records it by compare-and-set, so none waits
// for a leader and none is lost while a replica lives.
func runExits(ctx context.Context, srv *api.Server, td *teardown) {
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.RunExits(bg)
	}()
	td.add(func() {
		stop()
		<-done
	})
}

// liveReconcileEvery is how often the leader checks that running and
// paused sandboxes still have their VM.
const liveReconcileEvery = time.Minute

// leaderLoops are what the leader runs until its leadership ends:
// srv.RunLeader (expiry, idle suspend; exits are every replica's, see
// runExits), at once and then every liveReconcileEvery the reconcile of
// live sandboxes, and the other loops in also (nil ones skipped: the
// object store's GC when it is off).
func leaderLoops(ctx context.Context, srv *api.Server, log *slog.Logger, also ...func(context.Context)) {
	var wg sync.WaitGroup
	for _, loop := range also {
		if loop != nil {
			wg.Go(func() { loop(ctx) })
		}
	}
	wg.Go(func() {
		tick := time.NewTicker(liveReconcileEvery)
		defer tick.Stop()
		for {
			if err := srv.ReconcileLive(ctx); err != nil && ctx.Err() == nil {
				log.Warn("reconcile live sandboxes", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	srv.RunLeader(ctx)
	wg.Wait()
}

// runLeaderLoops campaigns for the leader Lease in the background and runs
// the singleton loops (leaderLoops) while this replica leads. td stops the campaign (releasing the Lease) before
// the engine closes.
func runLeaderLoops(ctx context.Context, cfg ControlConfig, kube kubeClientset, identity string, srv *api.Server, td *teardown, log *slog.Logger,
	also ...func(context.Context)) error {
	ns, name, err := splitLease(cfg.LeaderLease)
	if err != nil {
		return err
	}
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	d := cfg.LeaderLeaseDuration
	go func() {
		done <- leader.RunAsLeader(bg, leader.Config{Client: kube, Namespace: ns, Name: name, Identity: identity,
			LeaseDuration: d, RenewDeadline: d * 2 / 3, RetryPeriod: d / 7, Logger: log.With("component", "leader")},
			func(leading context.Context) { leaderLoops(leading, srv, log, also...) })
	}()
	td.add(func() {
		stop()
		if err := <-done; err != nil {
			log.Error("leader election", "err", err)
		}
	})
	return nil
}
