// Package server wires the single-node spaced: configuration, start-up checks,
// the data dir, guest artifacts, the worker, the store, the operation engine
// and the HTTP API. It owns start-up order and shutdown; every piece of logic
// lives in the package it wires.
package server

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/guest"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker/local"
)

// Config is spaced's one configuration struct. Every field has a flag; the
// defaults are API.md's ("Running the server") and work on a fresh machine.
type Config struct {
	Listen   string
	DataDir  string
	Features []string
	Accel    string // auto|kvm|tcg

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

	BootTimeout time.Duration
	// PoolSize is how many restored, warmed VMs to keep per template
	// snapshot in use, to take on create; 0 disables pools.
	PoolSize     int
	DefaultQuota store.Quota
	LogFormat    string // text|json
	LogLevel     string // debug|info|warn|error

	// MaxConnsPerClient bounds the connections one remote IP holds open
	// (0: no bound).
	MaxConnsPerClient int

	// E2BRefuseInternet answers 403 to E2B creates asking for
	// allow_internet_access: true (internal/e2b).
	E2BRefuseInternet bool
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// ParseFlags reads the configuration from args (without the program name).
func ParseFlags(args []string) (Config, error) {
	var cfg Config
	fs := flag.NewFlagSet("spaced", flag.ContinueOnError)
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:8080", "address the API serves on")
	fs.StringVar(&cfg.DataDir, "data-dir", "/var/lib/space", "data directory (store, keys, templates, sandboxes)")
	fs.StringVar(&cfg.Store, "store", os.Getenv(StoreEnv), "store: empty for <data-dir>/space.db (SQLite), or a postgres:// or postgresql:// URL "+
		"(PostgreSQL, shared by control replicas); default $"+StoreEnv+", which keeps a password off the command line")
	var features multiFlag
	fs.Var(&features, "feature", "enable an incubating feature gate (repeatable)")
	var egressCAs multiFlag
	fs.Var(&egressCAs, "egress-ca-file", "PEM CA certificates the egress proxy trusts for upstreams, besides the system store (repeatable)")
	var sourceRoots multiFlag
	fs.Var(&sourceRoots, "template-source-root", "host directory template builds may read oci/rootfs paths from, besides <data-dir>/imports (repeatable)")
	var registryAllow multiFlag
	fs.Var(&registryAllow, "template-registry-allow", "registries (host[:port],…) template image pulls may reach on loopback, private or this host's addresses (repeatable)")
	fs.StringVar(&cfg.Accel, "accel", "auto", "VM acceleration: auto (KVM if a probe VM boots, else TCG), kvm or tcg")
	fs.StringVar(&cfg.KernelDir, "kernel-dir", guest.KernelDirFromEnv(), "guest kernel cache (filled by `make setup`)")
	fs.StringVar(&cfg.AgentBinary, "agent-binary", defaultAgentBinary(), "static space-agent binary put into guests")
	fs.StringVar(&cfg.QEMUBinary, "qemu", "", "qemu-system-x86_64 binary (default: from PATH)")
	fs.StringVar(&cfg.VMM, "vmm", "qemu", "VMM that runs sandboxes: qemu, or firecracker (needs KVM)")
	fs.StringVar(&cfg.FirecrackerBinary, "firecracker", "", "firecracker binary, under /usr (default: from PATH)")
	fs.DurationVar(&cfg.BootTimeout, "boot-timeout", 2*time.Minute, "bound on boot to agent ready")
	fs.IntVar(&cfg.PoolSize, "pool-size", local.DefaultPoolSize, "restored, warmed VMs kept per template in use, taken on create (0 disables pools)")
	fs.IntVar(&cfg.DefaultQuota.MaxSandboxes, "quota-sandboxes", 20, "default per-tenant limit on live sandboxes")
	fs.IntVar(&cfg.DefaultQuota.MaxVCPUs, "quota-vcpus", 32, "default per-tenant limit on vCPUs of live sandboxes")
	fs.IntVar(&cfg.DefaultQuota.MaxMemoryMiB, "quota-memory-mib", 32768, "default per-tenant limit on memory of live sandboxes")
	fs.IntVar(&cfg.MaxConnsPerClient, "max-conns-per-client", DefaultMaxConnsPerClient,
		"open connections one client (remote IP) may hold; more are closed at once (0: no bound; behind a proxy every client is the proxy)")
	fs.BoolVar(&cfg.E2BRefuseInternet, "e2b-refuse-internet", false, "refuse E2B creates with allow_internet_access: true (403); SPACE's own API is unaffected")
	fs.StringVar(&cfg.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if cfg.MaxConnsPerClient < 0 {
		return Config{}, fmt.Errorf("--max-conns-per-client must be 0 or more, not %d", cfg.MaxConnsPerClient)
	}
	if cfg.PoolSize < 0 {
		return Config{}, fmt.Errorf("--pool-size must be 0 or more, not %d", cfg.PoolSize)
	}
	if err := checkStore(cfg.Store); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	cfg.Features = features
	for _, f := range egressCAs {
		abs, err := filepath.Abs(f)
		if err != nil {
			return Config{}, err
		}
		cfg.EgressCAFiles = append(cfg.EgressCAFiles, abs)
	}
	for _, root := range sourceRoots {
		abs, err := filepath.Abs(root)
		if err != nil {
			return Config{}, err
		}
		cfg.TemplateSourceRoots = append(cfg.TemplateSourceRoots, abs)
	}
	for _, v := range registryAllow {
		for _, r := range strings.Split(v, ",") {
			if r = strings.TrimSpace(r); r != "" {
				cfg.TemplateRegistryAllow = append(cfg.TemplateRegistryAllow, r)
			}
		}
	}
	switch cfg.Accel {
	case "auto", "kvm", "tcg":
	default:
		return Config{}, fmt.Errorf("--accel must be auto, kvm or tcg, not %q", cfg.Accel)
	}
	switch {
	case cfg.VMM != "qemu" && cfg.VMM != "firecracker":
		return Config{}, fmt.Errorf("--vmm must be qemu or firecracker, not %q", cfg.VMM)
	case cfg.VMM == "firecracker" && cfg.Accel == "tcg":
		return Config{}, fmt.Errorf("--vmm firecracker runs on KVM only; it cannot use --accel tcg")
	}
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return Config{}, err
	}
	cfg.DataDir = abs
	return cfg, nil
}

func defaultAgentBinary() string {
	exe, err := os.Executable()
	if err != nil {
		return "space-agent"
	}
	return filepath.Join(filepath.Dir(exe), "space-agent")
}
