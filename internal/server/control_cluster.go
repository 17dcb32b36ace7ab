package server

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// kubeClientset is the Kubernetes API the control plane uses.
type kubeClientset = kubernetes.Interface

// KubeRate bounds the requests a process sends the Kubernetes API: QPS
// a second on average, Burst at once. client-go's own default when none
// is set is 5 and 10, which a control replica creating a Pod per sandbox
// reaches at 5 creates a second; the API server protects itself with its
// priority and fairness, so these only keep one process from flooding it.
type KubeRate struct {
	QPS   float64
	Burst int
}

// Defaults of the replicas' and the workers' rates (--kube-qps, --kube-burst).
var (
	DefaultControlKubeRate = KubeRate{QPS: 200, Burst: 400}
	DefaultWorkerKubeRate  = KubeRate{QPS: 50, Burst: 100}
)

// registerKubeRateFlags adds --kube-qps and --kube-burst, their defaults def.
func registerKubeRateFlags(fs *flag.FlagSet, r *KubeRate, def KubeRate) {
	*r = def
	fs.Float64Var(&r.QPS, "kube-qps", def.QPS, "requests a second this process sends the Kubernetes API on average (Pods, their status, Leases)")
	fs.IntVar(&r.Burst, "kube-burst", def.Burst, "requests this process may send the Kubernetes API at once, above --kube-qps")
}

func (r KubeRate) validate() error {
	if r.QPS <= 0 || r.Burst < 1 {
		return fmt.Errorf("--kube-qps (%g) and --kube-burst (%d) must be positive", r.QPS, r.Burst)
	}
	return nil
}

// apply sets rc's client-side rate (a zero rate keeps client-go's default).
func (r KubeRate) apply(rc *rest.Config) {
	if r.QPS > 0 {
		rc.QPS, rc.Burst = float32(r.QPS), r.Burst
	}
}

// kubeClient is a client of the cluster: from the kubeconfig file, or the
// in-cluster config (the Pod's ServiceAccount) when path is empty.
func kubeClient(path string, rate KubeRate) (kubeClientset, error) {
	var rc *rest.Config
	var err error
	if path == "" {
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("no --kubeconfig, and not running in a cluster: %w", err)
		}
	} else if rc, err = clientcmd.BuildConfigFromFlags("", path); err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	rc.UserAgent = "spaced-control"
	rate.apply(rc)
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, nil
}

// workerDialer reaches workers over the worker protocol with the token of
// --worker-token-file, over TLS with --worker-ca-file. Placement keeps one
// client per address and closes them.
func workerDialer(cfg ControlConfig, log *slog.Logger) (placement.Dial, error) {
	token, err := remote.LoadToken(cfg.WorkerTokenFile)
	if err != nil {
		return nil, fmt.Errorf("--worker-token-file: %w", err)
	}
	tlsConfig, err := WorkerClientTLS(cfg)
	if err != nil {
		return nil, err
	}
	wlog := log.With("component", "worker-protocol")
	return func(address string) (worker.Worker, error) {
		return remote.NewClient(remote.ClientConfig{Address: address, Token: token, TLS: tlsConfig, Logger: wlog})
	}, nil
}

// openObjectStore checks at start that --object-store answers (the bucket
// exists, the keys work), so a replica that could not reach it fails now,
// and returns it (nil without the flag). What the control plane keeps
// there is in control_artifacts.go.
func openObjectStore(ctx context.Context, cfg ControlConfig, td *teardown, log *slog.Logger) (*objstore.Store, error) {
	if cfg.ObjectStore == "" {
		return nil, nil
	}
	loc, err := objstore.ParseURL(cfg.ObjectStore)
	if err != nil {
		return nil, fmt.Errorf("--object-store: %w", err)
	}
	creds, err := objstore.LoadCredentials(cfg.ObjectStoreCredentialsFile)
	if err != nil {
		return nil, fmt.Errorf("--object-store-credentials-file: %w", err)
	}
	obj, err := objstore.Open(ctx, loc, creds, objstore.Options{})
	if err != nil {
		return nil, fmt.Errorf("--object-store: %w", err)
	}
	td.add(obj.Close)
	log.Info("object store", "bucket", loc.Bucket, "endpoint", loc.Endpoint)
	return obj, nil
}

// registerBaseTemplate builds the base template here and records it when
// it can (as root, with busybox-static, bash-static and the agent binary);
// otherwise it says so and leaves the store as it is: another replica, or
// an earlier start, may have recorded it. With publish (--object-store)
// the build is published first, as every build is, so workers fetch it by
// digest (their own base builds need not have the same digest); one that
// could not be published is not recorded.
func registerBaseTemplate(ctx context.Context, cfg Config, db store.Store, templatesDir string,
	publish func(context.Context, string, template.Metadata) error, log *slog.Logger) {
	if os.Geteuid() != 0 {
		log.Warn("not root: the base template is not built here", "templates", templatesDir)
		return
	}
	if _, err := os.Stat(cfg.AgentBinary); err != nil {
		log.Warn("no agent binary: the base template is not built here", "agent_binary", cfg.AgentBinary)
		return
	}
	base, err := template.BuildBase(ctx, template.BaseOptions{TemplatesDir: templatesDir, AgentBinary: cfg.AgentBinary, Logger: log})
	if err != nil {
		log.Warn("base template not built", "err", err)
		return
	}
	if publish != nil {
		if err := publish(ctx, template.BuildDir(templatesDir, base.Name, base.Digest), base); err != nil {
			log.Warn("base template not published: not recorded", "err", err)
			return
		}
	}
	if err := registerTemplate(ctx, db, base); err != nil {
		log.Warn("base template not recorded", "err", err)
	}
}
