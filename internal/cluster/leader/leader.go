// Package leader runs the control plane's singleton loops (expiry, idle
// suspend, reconcile) on one replica at a time: the one that holds a
// coordination/v1 Lease, elected with client-go's leaderelection. When the
// leader stops or cannot renew, another replica takes the Lease over once it
// expires, and its loops start there.
//
// It knows nothing of what the loops do; it must not import the API, store
// or operation packages.
package leader

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Config of one candidate.
type Config struct {
	Client kubernetes.Interface
	// Namespace and Name of the Lease the candidates share.
	Namespace string
	Name      string
	// Identity names this candidate (unique among them: host and pid).
	Identity string
	// LeaseDuration is how long a Lease lasts unrenewed before another
	// candidate may take it (15s when 0); RenewDeadline how long the leader
	// keeps trying to renew before it gives up leading (10s when 0);
	// RetryPeriod how often candidates try (2s when 0).
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	Logger        *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 15 * time.Second
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = 10 * time.Second
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// RunAsLeader campaigns for the Lease until ctx ends. Each time this
// candidate becomes leader it runs fn with a context that ends when the
// leadership does; it waits for fn to return before it campaigns again,
// so fn never runs twice at once here. When ctx ends the Lease is
// released, so another candidate leads without waiting for it to expire.
// It returns nil when ctx ends, or an error for a bad config.
func RunAsLeader(ctx context.Context, cfg Config, fn func(ctx context.Context)) error {
	cfg = cfg.withDefaults()
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Name == "" || cfg.Identity == "" {
		return fmt.Errorf("leader election: client, namespace, name and identity are required: %w", errdefs.ErrInvalidArgument)
	}
	log := cfg.Logger.With("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
		Client:     cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}
	for ctx.Err() == nil {
		var running sync.WaitGroup
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   cfg.LeaseDuration,
			RenewDeadline:   cfg.RenewDeadline,
			RetryPeriod:     cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            cfg.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(leading context.Context) {
					running.Add(1)
					defer running.Done()
					log.Info("leading")
					fn(leading)
				},
				OnStoppedLeading: func() { log.Info("stopped leading") },
				OnNewLeader: func(identity string) {
					if identity != cfg.Identity {
						log.Info("another candidate leads", "leader", identity)
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w: %w", errdefs.ErrInvalidArgument, err)
		}
		// Run returns when leadership is lost or ctx ends; fn's context
		// is cancelled then, and fn is waited for before trying again.
		elector.Run(ctx)
		running.Wait()
	}
	return nil
}
