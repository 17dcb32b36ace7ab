package server

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/secrets"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker/remote"
	"github.com/space-sandbox/space/internal/worker/sim"
)

// SimulateConfig is --simulate and its knobs: the host's worker is then
// the simulated one (internal/worker/sim, docs/simulate.md), for capacity
// planning of the control plane. No VM, kernel, root or network is used.
type SimulateConfig struct {
	Enabled bool
	Profile sim.Profile
}

// registerSimulateFlags adds --simulate, --simulate-seed,
// --simulate-guest-disk-mib and, per verb of sim.Verbs,
// --simulate-<verb>-latency MEDIAN[:SPREAD] and --simulate-<verb>-failure
// RATE, their defaults sim.DefaultProfile's.
func registerSimulateFlags(fs *flag.FlagSet, c *SimulateConfig) {
	c.Profile = sim.DefaultProfile()
	fs.BoolVar(&c.Enabled, "simulate", false, "run no VMs: a simulated worker keeps sandboxes in memory with the latencies and failure rates below, "+
		"for capacity planning of the control plane (docs/simulate.md); never for real workloads")
	fs.Uint64Var(&c.Profile.Seed, "simulate-seed", c.Profile.Seed, "seed of the simulation's latencies and failures (one seed and one sequence of calls repeat a run)")
	fs.IntVar(&c.Profile.GuestDiskMiB, "simulate-guest-disk-mib", sim.DefaultGuestDiskMiB, "bound on a simulated guest's files (MiB) when its sandbox sets no disk size")
	for _, verb := range sim.Verbs {
		fs.Var(latencyFlag{c.Profile.Timings, verb}, "simulate-"+string(verb)+"-latency",
			"latency of a simulated "+string(verb)+", `MEDIAN[:SPREAD]`: log-normal, about two thirds within MEDIAN±SPREAD")
		fs.Var(failureFlag{c.Profile.Timings, verb}, "simulate-"+string(verb)+"-failure",
			"`RATE`, 0 to 1, at which a simulated "+string(verb)+" fails")
	}
}

// latencyFlag sets one verb's latency in a Profile's timings.
type latencyFlag struct {
	timings map[sim.Verb]sim.Timing
	verb    sim.Verb
}

func (f latencyFlag) String() string {
	if f.timings == nil {
		return ""
	}
	return f.timings[f.verb].Latency.String()
}

func (f latencyFlag) Set(s string) error {
	l, err := sim.ParseLatency(s)
	if err != nil {
		return err
	}
	t := f.timings[f.verb]
	t.Latency = l
	f.timings[f.verb] = t
	return nil
}

// failureFlag sets one verb's failure rate in a Profile's timings.
type failureFlag struct {
	timings map[sim.Verb]sim.Timing
	verb    sim.Verb
}

func (f failureFlag) String() string {
	if f.timings == nil {
		return ""
	}
	return strconv.FormatFloat(f.timings[f.verb].FailureRate, 'g', -1, 64)
}

func (f failureFlag) Set(s string) error {
	r, err := sim.ParseFailureRate(s)
	if err != nil {
		return err
	}
	t := f.timings[f.verb]
	t.FailureRate = r
	f.timings[f.verb] = t
	return nil
}

// validate checks the knobs the flag values do not check themselves.
func (c *SimulateConfig) validate() error {
	if c.Enabled && c.Profile.GuestDiskMiB < 1 {
		return fmt.Errorf("--simulate-guest-disk-mib must be 1 or more, not %d", c.Profile.GuestDiskMiB)
	}
	return nil
}

// startSimulated makes the simulated worker and says loudly that it is one.
func startSimulated(c SimulateConfig, who string, log *slog.Logger) *sim.Worker {
	attrs := []any{"seed", c.Profile.Seed, "guest_disk_mib", c.Profile.GuestDiskMiB}
	for _, v := range sim.Verbs {
		t := c.Profile.Timings[v]
		attrs = append(attrs, string(v), fmt.Sprintf("%s fail=%g", t.Latency, t.FailureRate))
	}
	log.Warn(who+" runs a SIMULATED worker (--simulate): no VMs run and no guest code executes; "+
		"sandboxes live in this process's memory, for capacity planning only", attrs...)
	return sim.New(sim.Config{Profile: c.Profile, Logger: log.With("component", "sim")})
}

// simulatedBase is the base template a simulated single node records, and
// a simulated cluster worker publishes (simulatedBuilds): a name and
// defaults, no image (the simulated worker needs none).
func simulatedBase() template.Metadata {
	d := template.DefaultBaseDefaults
	return template.Metadata{Name: "base", Digest: fmt.Sprintf("sha256:%x", sha256.Sum256([]byte("space simulated base"))),
		Defaults: d, CreatedAt: time.Unix(0, 0).UTC()}
}

// simulatedBuilds is a simulated cluster worker's template builder: it
// publishes only the simulated base (a control replica records its base
// from a worker), so a fleet of simulated workers serves creates of base;
// every other build is refused, as no image could be made or used.
type simulatedBuilds struct{}

func (simulatedBuilds) BuildTemplate(ctx context.Context, b remote.TemplateBuild, progress template.ProgressFunc, log io.Writer) (template.Metadata, error) {
	if !b.Base {
		return template.Metadata{}, errdefs.New(errdefs.ErrFailedPrecondition,
			"a simulated worker (--simulate) builds no templates: it publishes only the simulated base")
	}
	return simulatedBase(), nil
}

// simulatedNode sets up what a simulated single node needs instead of a
// host: the data dir and the secrets service (no namespaces, no egress).
func simulatedNode(ctx context.Context, cfg Config, db store.Store, log *slog.Logger) (netParts, error) {
	key, err := secrets.LoadKey(filepath.Join(cfg.DataDir, secrets.KeyFile))
	if err != nil {
		return netParts{}, fmt.Errorf("secrets key: %w", err)
	}
	sec, err := secrets.New(db, key, log.With("component", "secrets"))
	if err != nil {
		return netParts{}, err
	}
	return netParts{secrets: sec}, nil
}

// ensureDataDir makes the data dir of a simulated process, which skips
// the host's set-up that makes it otherwise.
func ensureDataDir(cfg Config) error {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	return nil
}
