package server

import (
	"flag"
	"fmt"
	"path/filepath"
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
	flags := registerConfigFlags(fs, &cfg.Config, "data directory (templates, sandboxes, snapshots)")
	flags.registerHost(fs)
	registerNodeFlags(fs, &cfg.Node)
	registerObjectStoreFlags(fs, &cfg.ObjectStore)
	if err := parseFlags(fs, args); err != nil {
		return WorkerConfig{}, err
	}
	if err := flags.finish(fs); err != nil {
		return WorkerConfig{}, err
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return WorkerConfig{}, fmt.Errorf("--tls-cert-file and --tls-key-file go together")
	}
	if err := cfg.Node.validate(); err != nil {
		return WorkerConfig{}, err
	}
	if err := cfg.ObjectStore.validate(); err != nil {
		return WorkerConfig{}, err
	}
	if cfg.Simulate.Enabled && cfg.ObjectStore.URL != "" {
		return WorkerConfig{}, fmt.Errorf("--simulate keeps no object store: drop --object-store")
	}
	cfg.Node.ObjectStore = cfg.ObjectStore.URL != "" // a drain moves sandboxes through it
	if cfg.TokenFile == "" {
		cfg.TokenFile = filepath.Join(cfg.DataDir, "worker.token")
	}
	return cfg, nil
}
