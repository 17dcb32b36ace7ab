package server

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/egress"
	"github.com/space-sandbox/space/internal/guest"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/worker/local"
)

// configFlags are the flags of Config that spaced's roles share, in three
// groups: every role's (registerConfigFlags), the API's, which a single
// node and a control replica serve (registerAPI), and the VM host's, which
// a single node and a worker run (registerHost). A role registers its groups, adds
// its own flags, parses, then calls finish.
type configFlags struct {
	cfg                             *Config
	api, host                       bool
	features, sourceRoots, registry multiFlag
	egressCAs                       multiFlag
	egressAllowPrivate, egressDeny  multiFlag
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// registerConfigFlags registers every role's flags into cfg: --data-dir
// (dataDirHelp says what the role keeps there), --feature and the logs.
func registerConfigFlags(fs *flag.FlagSet, cfg *Config, dataDirHelp string) *configFlags {
	f := &configFlags{cfg: cfg}
	fs.StringVar(&cfg.DataDir, "data-dir", "/var/lib/space", dataDirHelp)
	fs.Var(&f.features, "feature", "enable an incubating feature gate (repeatable)")
	fs.StringVar(&cfg.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&cfg.DebugListen, "debug-listen", "", "tests only: loopback address serving this process's memory and goroutine counts (GET /debug/runtime) and Go profiles (/debug/pprof/); empty: off")
	return f
}

// registerAPI registers the public API's flags: where it listens, --store
// (storeHelp says which stores the role takes), template builds' sources,
// default quotas and client limits.
func (f *configFlags) registerAPI(fs *flag.FlagSet, storeHelp string) {
	cfg := f.cfg
	f.api = true
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:8080", "address the API serves on")
	fs.StringVar(&cfg.APITLSCertFile, "tls-cert-file", "", "PEM certificate: serve the API over TLS (with --tls-key-file)")
	fs.StringVar(&cfg.APITLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&cfg.PreviewDomain, "preview-domain", "localhost", "domain of preview URLs: {port}-{sandbox_id}.DOMAIN on this listener reaches that port in the sandbox")
	fs.StringVar(&cfg.PreviewTLSCertFile, "preview-tls-cert", "", "PEM wildcard certificate for *.<preview-domain>, served by SNI beside --tls-cert-file (with --preview-tls-key)")
	fs.StringVar(&cfg.PreviewTLSKeyFile, "preview-tls-key", "", "PEM private key of --preview-tls-cert")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "", "address /metrics is served on instead of the API's (empty: on the API's, unauthenticated)")
	fs.StringVar(&cfg.Store, "store", os.Getenv(StoreEnv), storeHelp)
	fs.Var(&f.sourceRoots, "template-source-root", "host directory template builds may read oci/rootfs paths from, besides <data-dir>/imports (repeatable)")
	fs.Var(&f.registry, "template-registry-allow", "registries (host[:port],…) template image pulls may reach on loopback, private or this host's addresses (repeatable)")
	fs.IntVar(&cfg.DefaultQuota.MaxSandboxes, "quota-sandboxes", 20, "default per-tenant limit on live sandboxes")
	fs.IntVar(&cfg.DefaultQuota.MaxVCPUs, "quota-vcpus", 32, "default per-tenant limit on vCPUs of live sandboxes")
	fs.IntVar(&cfg.DefaultQuota.MaxMemoryMiB, "quota-memory-mib", 32768, "default per-tenant limit on memory of live sandboxes")
	fs.IntVar(&cfg.OperationConcurrency, "operation-concurrency", operation.DefaultConcurrency,
		"operations (creates, deletes, suspends, wakes, …) run at once by this process; each is a VM operation in flight on a worker, so more than a host's cores slows each one rather than finishing more")
	fs.IntVar(&cfg.OperationTenantShare, "operation-tenant-share", 0,
		"how many of --operation-concurrency one tenant's operations hold at once, so one tenant cannot starve another (0: half of them, at least 1)")
	fs.IntVar(&cfg.MaxConnsPerClient, "max-conns-per-client", DefaultMaxConnsPerClient,
		"open connections one client (remote IP) may hold; more are closed at once (0: no bound; behind a proxy every client is the proxy)")
	fs.BoolVar(&cfg.E2BRefuseInternet, "e2b-refuse-internet", false, "refuse E2B creates with allow_internet_access: true (403); SPACE's own API is unaffected")
}

// registerHost registers the VM host's flags: the VMM, guest kernel and
// agent, boot bound, warm pools and the egress proxy's CAs.
func (f *configFlags) registerHost(fs *flag.FlagSet) {
	cfg := f.cfg
	f.host = true
	fs.Var(&f.egressCAs, "egress-ca-file", "PEM CA certificates the egress proxy trusts for upstreams, besides the system store (repeatable)")
	fs.Var(&f.egressAllowPrivate, "egress-allow-private", "private ranges (CIDR,…: RFC 1918, CGNAT, link-local, ULA) sandboxes may reach as their policies allow; "+
		"none by default, whatever a policy says; a cloud metadata address only if listed exactly (repeatable)")
	fs.Var(&f.egressDeny, "egress-deny", "ranges (CIDR,…) no sandbox may reach whatever its policy and --egress-allow-private say, e.g. the cluster's Pod and Service CIDRs (repeatable)")
	fs.StringVar(&cfg.Accel, "accel", "auto", "VM acceleration: auto (KVM if a probe VM boots, else TCG), kvm or tcg")
	fs.StringVar(&cfg.KernelDir, "kernel-dir", guest.KernelDirFromEnv(), "guest kernel cache (filled by make setup)")
	fs.StringVar(&cfg.AgentBinary, "agent-binary", defaultAgentBinary(), "static space-agent binary put into guests")
	fs.StringVar(&cfg.QEMUBinary, "qemu", "", "qemu-system-x86_64 binary (default: from PATH)")
	fs.StringVar(&cfg.VMM, "vmm", "qemu", "VMM that runs sandboxes: qemu, or firecracker (needs KVM)")
	fs.StringVar(&cfg.FirecrackerBinary, "firecracker", "", "firecracker binary, under /usr (default: from PATH)")
	fs.DurationVar(&cfg.BootTimeout, "boot-timeout", 2*time.Minute, "bound on boot to agent ready")
	fs.IntVar(&cfg.PoolSize, "pool-size", local.DefaultPoolSize, "restored, warmed VMs kept per template in use, taken on create (0 disables pools)")
	fs.IntVar(&cfg.WakePoolSize, "wake-pool-size", local.DefaultWakePoolSize, "VMMs started ahead per shape of recent suspends, taken on wake (0 disables wake slots)")
	fs.IntVar(&cfg.WakePoolMemoryMiB, "wake-pool-memory-mib", local.DefaultWakePoolMemoryMiB, "bound on the guest memory of all wake slots together, in MiB")
	registerSimulateFlags(fs, &cfg.Simulate)
}

// finish, once fs has parsed, refuses positional arguments and values the
// registered groups do not take, and puts the repeatable flags and the
// absolute data dir into the Config.
func (f *configFlags) finish(fs *flag.FlagSet) error {
	cfg := f.cfg
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	cfg.Features = f.features
	if err := checkDebugListen(cfg.DebugListen); err != nil {
		return err
	}
	if f.api && (cfg.APITLSCertFile == "") != (cfg.APITLSKeyFile == "") {
		return fmt.Errorf("--tls-cert-file and --tls-key-file go together")
	}
	if f.api {
		if err := cfg.checkPreview(); err != nil {
			return err
		}
		if err := cfg.checkOperations(); err != nil {
			return err
		}
	}
	if f.host {
		if err := cfg.checkHost(); err != nil {
			return err
		}
	}
	var err error
	if cfg.EgressCAFiles, err = absPaths(f.egressCAs); err != nil {
		return err
	}
	if cfg.EgressAllowPrivate, err = egress.ParsePrefixes(f.egressAllowPrivate); err != nil {
		return fmt.Errorf("--egress-allow-private: %w", err)
	}
	if cfg.EgressDeny, err = egress.ParsePrefixes(f.egressDeny); err != nil {
		return fmt.Errorf("--egress-deny: %w", err)
	}
	if cfg.TemplateSourceRoots, err = absPaths(f.sourceRoots); err != nil {
		return err
	}
	for _, v := range f.registry {
		for _, r := range strings.Split(v, ",") {
			if r = strings.TrimSpace(r); r != "" {
				cfg.TemplateRegistryAllow = append(cfg.TemplateRegistryAllow, r)
			}
		}
	}
	cfg.DataDir, err = filepath.Abs(cfg.DataDir)
	return err
}

// checkOperations validates the operation engine's flags.
func (cfg *Config) checkOperations() error {
	switch {
	case cfg.OperationConcurrency < 1:
		return fmt.Errorf("--operation-concurrency must be 1 or more, not %d", cfg.OperationConcurrency)
	case cfg.OperationTenantShare < 0:
		return fmt.Errorf("--operation-tenant-share must be 0 (half of --operation-concurrency) or more, not %d", cfg.OperationTenantShare)
	case cfg.OperationTenantShare > cfg.OperationConcurrency:
		return fmt.Errorf("--operation-tenant-share %d must not exceed --operation-concurrency %d", cfg.OperationTenantShare, cfg.OperationConcurrency)
	}
	return nil
}

// checkHost validates the VM host's flags.
func (cfg *Config) checkHost() error {
	if err := cfg.Simulate.validate(); err != nil {
		return err
	}
	switch {
	case cfg.PoolSize < 0:
		return fmt.Errorf("--pool-size must be 0 or more, not %d", cfg.PoolSize)
	case cfg.WakePoolSize < 0:
		return fmt.Errorf("--wake-pool-size must be 0 or more, not %d", cfg.WakePoolSize)
	case cfg.WakePoolMemoryMiB < 1:
		return fmt.Errorf("--wake-pool-memory-mib must be 1 or more, not %d", cfg.WakePoolMemoryMiB)
	case cfg.Accel != "auto" && cfg.Accel != "kvm" && cfg.Accel != "tcg":
		return fmt.Errorf("--accel must be auto, kvm or tcg, not %q", cfg.Accel)
	case cfg.VMM != "qemu" && cfg.VMM != "firecracker":
		return fmt.Errorf("--vmm must be qemu or firecracker, not %q", cfg.VMM)
	case cfg.VMM == "firecracker" && cfg.Accel == "tcg":
		return fmt.Errorf("--vmm firecracker runs on KVM only; it cannot use --accel tcg")
	}
	return nil
}

// absPaths is paths made absolute (nil for none).
func absPaths(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		out = append(out, abs)
	}
	return out, nil
}
