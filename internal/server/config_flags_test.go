package server

import (
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/network"
)

// The flag groups the roles share parse the same way in each role that
// has them, and a role refuses the flags of a group it does not have.
func TestSharedFlagGroups(t *testing.T) {
	t.Setenv(StoreEnv, "")
	t.Chdir(t.TempDir())
	wd, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	control := []string{"--store", "postgres://u@db/space", "--worker-token-file", "t", "--admin-key-file", "a"}
	every := []string{"--data-dir", "rel", "--feature", "x", "--feature", "y", "--log-level", "debug"}
	api := []string{"--template-registry-allow", "reg:5000, 10.0.0.5", "--template-source-root", "src", "--quota-vcpus", "7",
		"--operation-concurrency", "64", "--operation-tenant-share", "16"}
	host := []string{"--egress-ca-file", "ca.pem", "--pool-size", "3", "--accel", "tcg", "--wake-pool-size", "2", "--wake-pool-memory-mib", "1024",
		"--egress-allow-private", "10.20.0.0/16, 192.168.7.7", "--egress-allow-private", "fd00:1::/64", "--egress-deny", "10.20.96.0/20,10.20.128.0/20"}
	wantEvery := func(role string, cfg Config) {
		t.Helper()
		if cfg.DataDir != filepath.Join(wd, "rel") || !slices.Equal(cfg.Features, []string{"x", "y"}) || cfg.LogLevel != "debug" {
			t.Errorf("%s: every role's flags: data dir %q, features %q, log level %q", role, cfg.DataDir, cfg.Features, cfg.LogLevel)
		}
	}
	wantAPI := func(role string, cfg Config) {
		t.Helper()
		if !slices.Equal(cfg.TemplateRegistryAllow, []string{"reg:5000", "10.0.0.5"}) ||
			!slices.Equal(cfg.TemplateSourceRoots, []string{filepath.Join(wd, "src")}) || cfg.DefaultQuota.MaxVCPUs != 7 {
			t.Errorf("%s: API flags: registries %q, source roots %q, vCPU quota %d", role, cfg.TemplateRegistryAllow, cfg.TemplateSourceRoots, cfg.DefaultQuota.MaxVCPUs)
		}
		if cfg.OperationConcurrency != 64 || cfg.OperationTenantShare != 16 {
			t.Errorf("%s: operation flags: concurrency %d, tenant share %d", role, cfg.OperationConcurrency, cfg.OperationTenantShare)
		}
	}
	wantHost := func(role string, cfg Config) {
		t.Helper()
		if !slices.Equal(cfg.EgressCAFiles, []string{filepath.Join(wd, "ca.pem")}) || cfg.PoolSize != 3 || cfg.Accel != "tcg" {
			t.Errorf("%s: host flags: egress CAs %q, pool size %d, accel %q", role, cfg.EgressCAFiles, cfg.PoolSize, cfg.Accel)
		}
		if want := prefixes("10.20.0.0/16", "192.168.7.7/32", "fd00:1::/64"); !slices.Equal(cfg.EgressAllowPrivate, want) {
			t.Errorf("%s: --egress-allow-private: %v, want %v", role, cfg.EgressAllowPrivate, want)
		}
		if want := prefixes("10.20.96.0/20", "10.20.128.0/20"); !slices.Equal(cfg.EgressDeny, want) {
			t.Errorf("%s: --egress-deny: %v, want %v", role, cfg.EgressDeny, want)
		}
		if cfg.WakePoolSize != 2 || cfg.WakePoolMemoryMiB != 1024 {
			t.Errorf("%s: host flags: wake pool size %d, memory %d MiB", role, cfg.WakePoolSize, cfg.WakePoolMemoryMiB)
		}
	}

	single, err := ParseFlags(slices.Concat(every, api, host))
	if err != nil {
		t.Fatal(err)
	}
	wantEvery("single node", single)
	wantAPI("single node", single)
	wantHost("single node", single)
	ctl, err := ParseControlFlags(slices.Concat(control, every, api))
	if err != nil {
		t.Fatal(err)
	}
	wantEvery("control", ctl.Config)
	wantAPI("control", ctl.Config)
	wkr, err := ParseWorkerFlags(slices.Concat(every, host))
	if err != nil {
		t.Fatal(err)
	}
	wantEvery("worker", wkr.Config)
	wantHost("worker", wkr.Config)

	if _, err := ParseControlFlags(slices.Concat(control, []string{"--pool-size", "3"})); err == nil || !strings.Contains(err.Error(), "pool-size") {
		t.Errorf("control took a host flag: %v", err)
	}
	if _, err := ParseWorkerFlags([]string{"--quota-vcpus", "7"}); err == nil || !strings.Contains(err.Error(), "quota-vcpus") {
		t.Errorf("worker took an API flag: %v", err)
	}
	if _, err := ParseWorkerFlags([]string{"--operation-concurrency", "64"}); err == nil || !strings.Contains(err.Error(), "operation-concurrency") {
		t.Errorf("worker took an API flag: %v", err)
	}
	for role, parse := range map[string]func([]string) error{
		"single node": func(a []string) error { _, err := ParseFlags(a); return err },
		"control":     func(a []string) error { _, err := ParseControlFlags(slices.Concat(control, a)); return err },
	} {
		for _, bad := range [][]string{{"--operation-concurrency", "0"}, {"--operation-tenant-share", "-1"},
			{"--operation-tenant-share", "9", "--operation-concurrency", "8"}} {
			if err := parse(bad); err == nil || !strings.Contains(err.Error(), bad[0]) {
				t.Errorf("%s: %v: %v", role, bad, err)
			}
		}
	}
	for role, parse := range map[string]func([]string) error{
		"single node": func(a []string) error { _, err := ParseFlags(a); return err },
		"worker":      func(a []string) error { _, err := ParseWorkerFlags(a); return err },
	} {
		if err := parse([]string{"--accel", "hvf"}); err == nil || !strings.Contains(err.Error(), "--accel") {
			t.Errorf("%s: --accel hvf: %v", role, err)
		}
		for _, bad := range [][]string{{"--wake-pool-size", "-1"}, {"--wake-pool-memory-mib", "0"},
			{"--egress-allow-private", "10.0.0.0/33"}, {"--egress-deny", "pods.internal"}} {
			if err := parse(bad); err == nil || !strings.Contains(err.Error(), bad[0]) {
				t.Errorf("%s: %v: %v", role, bad, err)
			}
		}
		if err := parse([]string{"stray"}); err == nil || !strings.Contains(err.Error(), "unexpected arguments") {
			t.Errorf("%s: a positional argument: %v", role, err)
		}
	}
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// The egress service of a single node and of a worker gets the operator's
// private allow-list, and its deny list on top of the sandbox link
// network; by default no private range at all.
func TestEgressConfigFromFlags(t *testing.T) {
	for role, parse := range map[string]func([]string) (Config, error){
		"single node": ParseFlags,
		"worker": func(a []string) (Config, error) {
			w, err := ParseWorkerFlags(a)
			return w.Config, err
		},
	} {
		cfg, err := parse([]string{"--egress-allow-private", "10.0.0.0/8", "--egress-deny", "10.96.0.0/12,10.244.0.0/16"})
		if err != nil {
			t.Fatal(err)
		}
		ec := egressConfig(cfg, slog.New(slog.DiscardHandler), nil, nil)
		if want := append([]netip.Prefix{network.GuestPrefix}, prefixes("10.96.0.0/12", "10.244.0.0/16")...); !slices.Equal(ec.Forbidden, want) {
			t.Errorf("%s: egress forbidden %v, want %v", role, ec.Forbidden, want)
		}
		if want := prefixes("10.0.0.0/8"); !slices.Equal(ec.AllowPrivate, want) {
			t.Errorf("%s: egress allow-private %v, want %v", role, ec.AllowPrivate, want)
		}
		cfg, err = parse(nil)
		if err != nil {
			t.Fatal(err)
		}
		if ec := egressConfig(cfg, slog.New(slog.DiscardHandler), nil, nil); len(ec.AllowPrivate) != 0 || !slices.Equal(ec.Forbidden, []netip.Prefix{network.GuestPrefix}) {
			t.Errorf("%s: defaults: allow-private %v forbidden %v", role, ec.AllowPrivate, ec.Forbidden)
		}
	}
}
