// Package server wires the single-node spaced: configuration, start-up checks,
// the data dir, guest artifacts, the worker, the store, the operation engine
// and the HTTP API. It owns start-up order and shutdown; every piece of logic
// lives in the package it wires.
package server

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/space-sandbox/space/internal/store"
)

// Config is spaced's one configuration struct. Every field has a flag
// (config_flags.go); the defaults work on a fresh machine.
type Config struct {
	Listen string
	// APITLSCertFile and APITLSKeyFile, when set, serve the API over TLS.
	APITLSCertFile, APITLSKeyFile string
	// PreviewDomain is where preview URLs live: a request whose Host is
	// {port}-{sandbox_id}.PreviewDomain goes to that guest port
	// (default localhost, which browsers and curl resolve to loopback).
	// PreviewTLSCertFile and PreviewTLSKeyFile, when set, are a wildcard
	// certificate for *.PreviewDomain the API's listener serves to clients
	// naming a preview host (SNI), beside the API's own (needs the API's TLS).
	PreviewDomain                         string
	PreviewTLSCertFile, PreviewTLSKeyFile string
	// MetricsListen, when set, is the address /metrics is served on
	// instead of the API's: the API's port then answers it 404.
	MetricsListen string
	DataDir       string
	Features      []string
	Accel         string // auto|kvm|tcg

	// Store is empty for the SQLite file in DataDir, or the postgres:// URL
	// of the PostgreSQL database control replicas share.
	Store string

	KernelDir   string // cache of Debian's cloud kernel (make setup fills it)
	AgentBinary string // static space-agent; default: beside the spaced binary
	QEMUBinary  string // default: qemu-system-x86_64 on PATH
	// VMM is the driver sandboxes run in: qemu or firecracker (KVM hosts).
	VMM               string
	FirecrackerBinary string // default: firecracker on PATH

	// TemplateSourceRoots are the host directories template builds may
	// read path sources from, besides <DataDir>/imports.
	TemplateSourceRoots []string
	// TemplateRegistryAllow names registries ("host" or "host:port") that
	// template image pulls may reach although their addresses are loopback,
	// private or this host's; by default pulls reach only public addresses.
	TemplateRegistryAllow []string

	// EgressCAFiles are PEM CA certificates the egress proxy trusts, besides
	// the system store, for upstreams of intercepted HTTPS.
	EgressCAFiles []string
	// EgressAllowPrivate are the parts of the private ranges (RFC 1918,
	// CGNAT, link-local, ULA, benchmarking; netrange.Private) that
	// sandboxes may reach as their policies allow; by default none, so a
	// sandbox reaches neither the host's networks nor the cluster's.
	EgressAllowPrivate []netip.Prefix
	// EgressDeny are ranges no sandbox ever reaches, whatever its policy
	// and EgressAllowPrivate say: the cluster's Pod and Service CIDRs.
	EgressDeny []netip.Prefix

	BootTimeout time.Duration
	// PoolSize is how many restored, warmed VMs to keep per template
	// snapshot in use, to take on create; 0 disables pools.
	PoolSize int
	// WakePoolSize is how many VMMs to start ahead per shape of recent
	// suspends, for wakes to take; 0 disables them. WakePoolMemoryMiB
	// bounds their guest memory together.
	WakePoolSize      int
	WakePoolMemoryMiB int
	DefaultQuota      store.Quota
	LogFormat         string // text|json
	LogLevel          string // debug|info|warn|error

	// OperationConcurrency is how many operations' handlers run at once
	// (operation.Config.Concurrency), and OperationTenantShare how many of
	// those one tenant's hold (0: half of them).
	OperationConcurrency, OperationTenantShare int

	// MaxConnsPerClient bounds the connections one remote IP holds open
	// (0: no bound).
	MaxConnsPerClient int

	// E2BRefuseInternet answers 403 to E2B creates asking for
	// allow_internet_access: true (internal/e2b).
	E2BRefuseInternet bool

	// Simulate, when enabled, runs the simulated worker instead of VMs
	// (simulate.go): the host's flags other than it are then unused.
	Simulate SimulateConfig

	// DebugListen, when set (tests only), is a loopback address serving
	// the process's own memory and goroutine counts (debug.go).
	DebugListen string
}

// ParseFlags reads the configuration from args (without the program name).
func ParseFlags(args []string) (Config, error) {
	var cfg Config
	fs := flag.NewFlagSet("spaced", flag.ContinueOnError)
	flags := registerConfigFlags(fs, &cfg, "data directory (store, keys, templates, sandboxes)")
	flags.registerAPI(fs, "store: empty for <data-dir>/space.db (SQLite), or a postgres:// or postgresql:// URL "+
		"(PostgreSQL, shared by control replicas); default $"+StoreEnv+", which keeps a password off the command line")
	flags.registerHost(fs)
	if err := parseFlags(fs, args); err != nil {
		return Config{}, err
	}
	if cfg.MaxConnsPerClient < 0 {
		return Config{}, fmt.Errorf("--max-conns-per-client must be 0 or more, not %d", cfg.MaxConnsPerClient)
	}
	if err := checkStore(cfg.Store); err != nil {
		return Config{}, err
	}
	if err := flags.finish(fs); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func defaultAgentBinary() string {
	exe, err := os.Executable()
	if err != nil {
		return "space-agent"
	}
	return filepath.Join(filepath.Dir(exe), "space-agent")
}
