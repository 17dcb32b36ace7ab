package server

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store/postgres"
)

// ControlConfig is the configuration of `spaced control`: the API, auth,
// operations and sandbox service of a cluster, with no worker in process.
// Its API fields are Config's (listen, data dir, store, features, quotas,
// template builders, logs); the rest say how it reaches Kubernetes and
// the workers.
type ControlConfig struct {
	Config
	// Kubeconfig is the kubeconfig file; empty: the in-cluster config.
	Kubeconfig string
	// Namespace holds the sandbox Pods.
	Namespace string
	// KubeRate bounds this replica's requests to the Kubernetes API.
	KubeRate KubeRate
	// WorkerTokenFile holds the worker protocol's token (required).
	WorkerTokenFile string
	// WorkerCAFile, when set, is the PEM CA the workers' TLS certificates
	// chain to: the protocol then runs over TLS.
	WorkerCAFile string
	// WorkerServerName is the name the workers' certificates hold, checked
	// instead of the address dialled (empty: that address).
	WorkerServerName string
	// AdminKeyFile holds the bootstrap admin key every replica registers
	// (required; a missing file is created with a new key).
	AdminKeyFile string
	// SecretsKeyFile holds the 32-byte key tenants' secrets are sealed
	// with, the same on every replica; empty: the secrets routes answer
	// 503 (a key per replica could not open the others' secrets).
	SecretsKeyFile string
	// LeaderLease is the Lease ("namespace/name") the replicas elect the
	// leader of the singleton loops on.
	LeaderLease string
	// LeaderLeaseDuration is how long that Lease lasts unrenewed.
	LeaderLeaseDuration time.Duration
	// OperationLeaseTTL is how long an operation lease lasts unrenewed;
	// a replica gone that long has its operations taken over.
	OperationLeaseTTL time.Duration
	// ScheduleTimeout bounds a create's wait for kube-scheduler and the
	// worker; an unplaced sandbox then ends resource_exhausted.
	ScheduleTimeout time.Duration
	// PodTolerationSeconds is how long a sandbox Pod stays bound to a
	// not-ready or unreachable node before it is evicted and its sandbox
	// fails as lost (0: k8s.DefaultTolerationSeconds, the flag's default).
	PodTolerationSeconds int64
	// ObjectStore is the s3:// URL of snapshots and template images, and
	// ObjectStoreCredentialsFile its keys (empty: SPACE_S3_ACCESS_KEY and
	// SPACE_S3_SECRET_KEY). Empty URL: none.
	ObjectStore                string
	ObjectStoreCredentialsFile string
	// ObjectGC is the leader's garbage collection of the object store.
	ObjectGC ObjectGCConfig
	// Drain is how node drains of workers are handled (control_drain.go).
	Drain DrainConfig

	// Serving, when set, is called with the bound API address once it
	// listens (tests and `make cluster` start on port 0).
	Serving func(addr string)
}

// DefaultLeaderLeaseName names the leader Lease when --leader-lease says
// only nothing: <namespace>/space-control.
const DefaultLeaderLeaseName = "space-control"

// ParseControlFlags reads `spaced control`'s flags (args without "control").
func ParseControlFlags(args []string) (ControlConfig, error) {
	var cfg ControlConfig
	fs := flag.NewFlagSet("spaced control", flag.ContinueOnError)
	flags := registerConfigFlags(fs, &cfg.Config, "scratch directory (template builds and their logs); the state is in --store")
	flags.registerAPI(fs, "the PostgreSQL database the replicas share: a postgres:// or postgresql:// URL (default $"+StoreEnv+")")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: the in-cluster config)")
	fs.StringVar(&cfg.Namespace, "namespace", k8s.DefaultNamespace, "namespace of the sandbox Pods")
	registerKubeRateFlags(fs, &cfg.KubeRate, DefaultControlKubeRate)
	fs.StringVar(&cfg.WorkerTokenFile, "worker-token-file", "", "file holding the worker protocol's token (required)")
	fs.StringVar(&cfg.WorkerCAFile, "worker-ca-file", "", "PEM CA of the workers' TLS certificates: reach workers over TLS")
	fs.StringVar(&cfg.WorkerServerName, "worker-server-name", "", "name the workers' TLS certificates hold, checked instead of the address dialled (with --worker-ca-file)")
	fs.StringVar(&cfg.AdminKeyFile, "admin-key-file", "", "file holding the bootstrap admin key (space_…), registered by every replica (required; created with a new key when missing)")
	fs.StringVar(&cfg.SecretsKeyFile, "secrets-key-file", "", "file holding the 32-byte key tenants' secrets are sealed with, shared by the replicas, mode 0600, 0400 or 0440 (default: secrets routes off)")
	fs.StringVar(&cfg.LeaderLease, "leader-lease", "", "Lease namespace/name the replicas elect the loops' leader on (default <namespace>/"+DefaultLeaderLeaseName+")")
	fs.DurationVar(&cfg.LeaderLeaseDuration, "leader-lease-duration", 15*time.Second, "how long the leader Lease lasts unrenewed")
	fs.DurationVar(&cfg.OperationLeaseTTL, "operation-lease", operation.DefaultLeaseTTL, "how long an operation lease lasts unrenewed before another replica takes the operation over")
	fs.DurationVar(&cfg.ScheduleTimeout, "schedule-timeout", 2*time.Minute, "bound on a create's wait for a worker; then it ends resource_exhausted")
	fs.Int64Var(&cfg.PodTolerationSeconds, "pod-toleration-seconds", k8s.DefaultTolerationSeconds, "how long a sandbox Pod stays on a not-ready or unreachable worker node before it is evicted and its sandbox fails as lost")
	fs.StringVar(&cfg.ObjectStore, "object-store", "", "s3://bucket/prefix?endpoint=host:port of snapshots and template images")
	fs.StringVar(&cfg.ObjectStoreCredentialsFile, "object-store-credentials-file", "", "file with access_key= and secret_key= lines (default $"+objstore.EnvAccessKey+", $"+objstore.EnvSecretKey+")")
	registerObjectGCFlags(fs, &cfg.ObjectGC)
	registerDrainFlags(fs, &cfg.Drain)
	fs.StringVar(&cfg.AgentBinary, "agent-binary", defaultAgentBinary(), "static space-agent binary put into built templates")
	if err := parseFlags(fs, args); err != nil {
		return ControlConfig{}, err
	}
	if err := flags.finish(fs); err != nil {
		return ControlConfig{}, err
	}
	if cfg.LeaderLease == "" {
		cfg.LeaderLease = cfg.Namespace + "/" + DefaultLeaderLeaseName
	}
	return cfg, cfg.check()
}

// check validates what the flags cannot: it is also RunControl's first step,
// so a config built in Go gets the same errors.
func (cfg ControlConfig) check() error {
	switch {
	case cfg.Store == "":
		return fmt.Errorf("spaced control needs --store (or $%s): the PostgreSQL database its replicas share; SQLite is for a single node", StoreEnv)
	case !postgres.IsDSN(cfg.Store):
		return errStoreFlag
	case cfg.WorkerTokenFile == "":
		return fmt.Errorf("spaced control needs --worker-token-file: the worker protocol's token, as the workers have it")
	case cfg.AdminKeyFile == "":
		return fmt.Errorf("spaced control needs --admin-key-file: the bootstrap admin key (space_ and 32 or more characters)")
	case cfg.Namespace == "":
		return fmt.Errorf("--namespace must not be empty")
	case cfg.PodTolerationSeconds < 0:
		return fmt.Errorf("--pod-toleration-seconds must not be negative")
	case cfg.ScheduleTimeout <= 0 || cfg.OperationLeaseTTL <= 0 || cfg.LeaderLeaseDuration <= 0:
		return fmt.Errorf("--schedule-timeout, --operation-lease and --leader-lease-duration must be positive")
	case cfg.MaxConnsPerClient < 0:
		return fmt.Errorf("--max-conns-per-client must be 0 or more, not %d", cfg.MaxConnsPerClient)
	}
	if err := cfg.Drain.validate(); err != nil {
		return err
	}
	if cfg.KubeRate != (KubeRate{}) { // a config built in Go may leave it to client-go
		if err := cfg.KubeRate.validate(); err != nil {
			return err
		}
	}
	if _, _, err := splitLease(cfg.LeaderLease); err != nil {
		return err
	}
	if err := cfg.ObjectGC.check(); err != nil {
		return err
	}
	if cfg.ObjectStore != "" {
		if _, err := objstore.ParseURL(cfg.ObjectStore); err != nil {
			return fmt.Errorf("--object-store: %w", err)
		}
	}
	return nil
}

// splitLease reads --leader-lease's "namespace/name".
func splitLease(v string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(v, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("--leader-lease must be namespace/name, not %q", v)
	}
	return namespace, name, nil
}
