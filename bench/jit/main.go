// Command jit measures what TCG translates when a restored guest runs its
// first commands: for a sandbox created from the template's ready snapshot
// (no pool: the restore is on the request path) and for one woken from
// suspend, it asks the VMM for "info jit" before the first command and
// after each of five (true three times, ls /, a shell echo), and reads the
// VMM's CPU time (all its threads' schedstat) beside each command's round
// trip. It prints medians over -runs runs of each step: the round trip,
// the VMM CPU time, the translation blocks (TBs) and host code bytes the
// step added, and any TB flush or invalidation. TCG only: under KVM no
// code is translated.
//
//	go run ./bench/jit -runs 5
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/space-sandbox/space/bench/internal/rig"
	"github.com/space-sandbox/space/bench/internal/stats"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/vmm/qemu"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local"
)

func main() {
	runs := flag.Int("runs", 5, "runs of each case (medians need at least 5)")
	agent := flag.String("agent", "bin/space-agent", "static space-agent binary")
	dataDir := flag.String("data-dir", "", "data dir (default: a temporary one, removed after)")
	raw := flag.Bool("raw", false, "also print QEMU's whole \"info jit\" before the first command of the first run")
	trace := flag.Bool("trace", false, "instead of the table: one create, its first command traced (QEMU's in_asm log) and the translated blocks named by guest function")
	flag.Parse()
	if *trace {
		if err := traceFirst(*agent, *dataDir); err != nil {
			fmt.Fprintln(os.Stderr, "bench/jit:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*runs, *agent, *dataDir, *raw); err != nil {
		fmt.Fprintln(os.Stderr, "bench/jit:", err)
		os.Exit(1)
	}
}

// steps are the commands run, in order, after the restore.
var steps = []struct {
	name string
	spec agentproto.ProcessSpec
}{
	{"true (first command)", agentproto.ProcessSpec{Argv: []string{"true"}}},
	{"true (second)", agentproto.ProcessSpec{Argv: []string{"true"}}},
	{"true (third)", agentproto.ProcessSpec{Argv: []string{"true"}}},
	{"ls / (new program)", agentproto.ProcessSpec{Argv: []string{"ls", "/"}}},
	{"sh -c 'echo hi' (new program)", agentproto.ProcessSpec{Shell: "echo hi"}},
}

// table holds one case's series: per step, round trip, VMM CPU, new TBs
// and new code; and the state before the first command.
type table struct {
	before            []stats.Series
	rtt, cpu, tb, kib []stats.Series
	minor, major      []stats.Series
	flushes           stats.Series
}

func newTable(name string) *table {
	t := &table{before: []stats.Series{
		{Name: name + ": TBs before the first command", Unit: "TBs"},
		{Name: name + ": host code before the first command", Unit: "KiB"},
	}, flushes: stats.Series{Name: name + ": TB flushes + invalidations during the steps", Unit: ""}}
	for _, s := range steps {
		p := name + ": " + s.name
		t.rtt = append(t.rtt, stats.Series{Name: p + " round trip", Unit: "ms"})
		t.cpu = append(t.cpu, stats.Series{Name: "  VMM CPU time", Unit: "ms"})
		t.tb = append(t.tb, stats.Series{Name: "  TBs translated", Unit: "TBs"})
		t.kib = append(t.kib, stats.Series{Name: "  host code generated", Unit: "KiB"})
		t.minor = append(t.minor, stats.Series{Name: "  VMM minor page faults", Unit: ""})
		t.major = append(t.major, stats.Series{Name: "  VMM major page faults", Unit: ""})
	}
	return t
}

func (t *table) series() []stats.Series {
	out := append([]stats.Series{}, t.before...)
	for i := range steps {
		out = append(out, t.rtt[i], t.cpu[i], t.tb[i], t.kib[i], t.minor[i], t.major[i])
	}
	return append(out, t.flushes)
}

// benchSpec is every measured sandbox's shape (ID set per sandbox).
var benchSpec = worker.SandboxSpec{Template: template.BaseName, VCPUs: 1, MemoryMiB: 256}

// openWorker opens the rig and a local worker without a create pool over
// the recording driver, with the base template's ready snapshot made.
func openWorker(ctx context.Context, agent, dataDir string) (*local.Worker, *recorder, string, func(), error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := rig.Open(ctx, agent, dataDir, "tcg", log)
	if err != nil {
		return nil, nil, "", nil, err
	}
	q, ok := r.Config.Driver.(*qemu.Driver)
	if !ok {
		r.Close()
		return nil, nil, "", nil, fmt.Errorf("driver is %T, want the QEMU driver", r.Config.Driver)
	}
	rec := &recorder{Driver: q, vms: map[int]*qemu.VM{}}
	cfg := r.Config
	cfg.Driver = rec
	cfg.PoolSize = -1 // every create restores on the request path
	w, err := local.New(ctx, cfg)
	if err != nil {
		r.Close()
		return nil, nil, "", nil, err
	}
	closeAll := func() { w.Close(); r.Close() }
	if err := w.PrepareTemplate(ctx, benchSpec); err != nil {
		closeAll()
		return nil, nil, "", nil, err
	}
	return w, rec, cfg.Storage.Root(), closeAll, nil
}

func run(runs int, agent, dataDir string, raw bool) error {
	ctx := context.Background()
	w, rec, _, closeAll, err := openWorker(ctx, agent, dataDir)
	if err != nil {
		return err
	}
	defer closeAll()
	spec := benchSpec
	tables := map[string]*table{"create": newTable("create, no pool"), "wake": newTable("wake from suspend")}
	for i := 0; i < runs; i++ {
		for _, mode := range []string{"create", "wake"} {
			sp := spec
			sp.ID = fmt.Sprintf("sbx_jit%d%s", i, mode)
			if err := measure(ctx, w, rec, sp, mode == "wake", tables[mode], raw && i == 0); err != nil {
				return err
			}
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("bench/jit: %d runs, accel=tcg, 1 vCPU, 256 MiB, base template; load average %s\n",
		runs, strings.Join(strings.Fields(string(load))[:3], " "))
	stats.Print(os.Stdout, append(tables["create"].series(), tables["wake"].series()...)...)
	return nil
}

// measure creates sandbox sp (and, with wake, runs a command, suspends and
// wakes it), then runs the steps, reading the VMM around each.
func measure(ctx context.Context, w *local.Worker, rec *recorder, sp worker.SandboxSpec, wake bool, t *table, raw bool) error {
	if _, err := w.CreateSandbox(ctx, sp); err != nil {
		return err
	}
	defer w.DeleteSandbox(ctx, sp.ID)
	c, err := w.Agent(ctx, sp.ID)
	if err != nil {
		return err
	}
	if wake {
		if _, err := rig.Run(ctx, c, "warm", agentproto.ProcessSpec{Argv: []string{"true"}}, nil); err != nil {
			return err
		}
		if _, err := w.SuspendSandbox(ctx, sp.ID); err != nil {
			return err
		}
		// Let the wake pool start its VMM, as in steady state.
		for deadline := time.Now().Add(30 * time.Second); w.WakePoolStats().Ready < 1 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := w.WakeSandbox(ctx, sp.ID); err != nil {
			return err
		}
	}
	vm, err := rec.sandboxVM(ctx, w, sp.ID)
	if err != nil {
		return err
	}
	prev, text, err := readVMM(ctx, vm)
	if err != nil {
		return err
	}
	if raw {
		fmt.Printf("info jit before the first command (%s, wake=%v):\n%s\n", sp.ID, wake, text)
	}
	t.before[0].Samples = append(t.before[0].Samples, float64(prev.jit.TBs))
	t.before[1].Samples = append(t.before[1].Samples, float64(prev.jit.CodeBytes)/1024)
	var flushes int64
	for i, s := range steps {
		t0 := time.Now()
		if _, err := rig.Run(ctx, c, fmt.Sprintf("step%d", i), s.spec, nil); err != nil {
			return err
		}
		t.rtt[i].AddDuration(time.Since(t0))
		now, _, err := readVMM(ctx, vm)
		if err != nil {
			return err
		}
		t.cpu[i].Samples = append(t.cpu[i].Samples, float64(now.cpuNS-prev.cpuNS)/1e6)
		t.tb[i].Samples = append(t.tb[i].Samples, float64(now.jit.TBs-prev.jit.TBs))
		t.kib[i].Samples = append(t.kib[i].Samples, float64(now.jit.CodeBytes-prev.jit.CodeBytes)/1024)
		t.minor[i].Samples = append(t.minor[i].Samples, float64(now.minor-prev.minor))
		t.major[i].Samples = append(t.major[i].Samples, float64(now.major-prev.major))
		flushes += now.jit.Flushes - prev.jit.Flushes + now.jit.Invalidations - prev.jit.Invalidations
		// Read again: the reads themselves run in the VMM.
		if prev, _, err = readVMM(ctx, vm); err != nil {
			return err
		}
	}
	t.flushes.Samples = append(t.flushes.Samples, float64(flushes))
	return nil
}
