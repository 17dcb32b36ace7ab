package server

import (
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/space-sandbox/space/internal/guest"
	"github.com/space-sandbox/space/internal/worker/local"
)

// WorkerConfig is the configuration of `spaced worker`: the local worker
// behind the worker protocol, and nothing of the API. Its host fields are
// Config's (data dir, VMM, kernel, agent, pools, egress, logs); Listen is
// the protocol's address.
type WorkerConfig struct {
	Config
	// TokenFile holds the protocol's internal token; a missing file is
	// created with a random token (default <data-dir>/worker.token).
	TokenFile string
	// TLSCertFile and TLSKeyFile, when both set, serve the protocol over
	// TLS (HTTP/2) instead of in clear (h2c).
	TLSCertFile, TLSKeyFile string
	// Node registers the host with Kubernetes (worker_node.go).
	Node NodeConfig
	// ObjectStore is where suspend snapshots go (objectstore.go).
	ObjectStore ObjectStoreConfig
}

// DefaultWorkerListen is where `spaced worker` serves the protocol.
const DefaultWorkerListen = "127.0.0.1:7070"

// ParseWorkerFlags reads `spaced worker`'s flags (args without "worker").
func ParseWorkerFlags(args []string) (WorkerConfig, error) {
	var cfg WorkerConfig
	fs := flag.NewFlagSet("spaced worker", flag.ContinueOnError)
	fs.StringVar(&cfg.Listen, "listen", DefaultWorkerListen, "address the worker protocol serves on")
	fs.StringVar(&cfg.TokenFile, "token-file", "", "file holding the worker protocol's token (default <data-dir>/worker.token, created when missing)")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "PEM certificate: serve the protocol over TLS (with --tls-key-file)")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&cfg.DataDir, "data-dir", "/var/lib/space", "data directory (templates, sandboxes, snapshots)")
	registerNodeFlags(fs, &cfg.Node)
	registerObjectStoreFlags(fs, &cfg.ObjectStore)
	var features multiFlag
	fs.Var(&features, "feature", "enable an incubating feature gate (repeatable)")
	var egressCAs multiFlag
	fs.Var(&egressCAs, "egress-ca-file", "PEM CA certificates the egress proxy trusts for upstreams, besides the system store (repeatable)")
	fs.StringVar(&cfg.Accel, "accel", "auto", "VM acceleration: auto (KVM if a probe VM boots, else TCG), kvm or tcg")
	fs.StringVar(&cfg.KernelDir, "kernel-dir", guest.KernelDirFromEnv(), "guest kernel cache (filled by `make setup`)")
	fs.StringVar(&cfg.AgentBinary, "agent-binary", defaultAgentBinary(), "static space-agent binary put into guests")
	fs.StringVar(&cfg.QEMUBinary, "qemu", "", "qemu-system-x86_64 binary (default: from PATH)")
	fs.StringVar(&cfg.VMM, "vmm", "qemu", "VMM that runs sandboxes: qemu, or firecracker (needs KVM)")
	fs.StringVar(&cfg.FirecrackerBinary, "firecracker", "", "firecracker binary, under /usr (default: from PATH)")
	fs.DurationVar(&cfg.BootTimeout, "boot-timeout", 2*time.Minute, "bound on boot to agent ready")
	fs.IntVar(&cfg.PoolSize, "pool-size", local.DefaultPoolSize, "restored, warmed VMs kept per template in use, taken on create (0 disables pools)")
	fs.StringVar(&cfg.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return WorkerConfig{}, err
	}
	if fs.NArg() > 0 {
		return WorkerConfig{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	cfg.Features = features
	for _, f := range egressCAs {
		abs, err := filepath.Abs(f)
		if err != nil {
			return WorkerConfig{}, err
		}
		cfg.EgressCAFiles = append(cfg.EgressCAFiles, abs)
	}
	switch {
	case cfg.PoolSize < 0:
		return WorkerConfig{}, fmt.Errorf("--pool-size must be 0 or more, not %d", cfg.PoolSize)
	case cfg.Accel != "auto" && cfg.Accel != "kvm" && cfg.Accel != "tcg":
		return WorkerConfig{}, fmt.Errorf("--accel must be auto, kvm or tcg, not %q", cfg.Accel)
	case cfg.VMM != "qemu" && cfg.VMM != "firecracker":
		return WorkerConfig{}, fmt.Errorf("--vmm must be qemu or firecracker, not %q", cfg.VMM)
	case cfg.VMM == "firecracker" && cfg.Accel == "tcg":
		return WorkerConfig{}, fmt.Errorf("--vmm firecracker runs on KVM only; it cannot use --accel tcg")
	case (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == ""):
		return WorkerConfig{}, fmt.Errorf("--tls-cert-file and --tls-key-file go together")
	}
	if err := cfg.Node.validate(); err != nil {
		return WorkerConfig{}, err
	}
	if err := cfg.ObjectStore.validate(); err != nil {
		return WorkerConfig{}, err
	}
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return WorkerConfig{}, err
	}
	cfg.DataDir = abs
	if cfg.TokenFile == "" {
		cfg.TokenFile = filepath.Join(cfg.DataDir, "worker.token")
	}
	return cfg, nil
}
