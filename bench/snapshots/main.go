// Command snapshots benchmarks sandbox snapshots on this host through the
// local worker (no HTTP API), side by side: cold boot to first command;
// create to first command without pools (restore on the request path) for
// 256 MiB and 2 GiB guests and 64 MiB and 2 GiB template disks, and with
// pools (a pooled VM ready, as in steady state); pause, wake from pause,
// suspend, wake from suspend and the suspend snapshot's size for 256 MiB
// and 1 GiB guests; the time a checkpoint stops the vCPUs; and gVisor's
// `runsc --network=none do true` as the peer when runsc is installed. It
// prints medians over -runs runs. With -network sandboxes have what spaced
// gives them (a namespace, tap and egress path each), so wakes take the
// networked path.
//
//	go run ./bench/snapshots -runs 10
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-sandbox/space/bench/internal/rig"
	"github.com/space-sandbox/space/bench/internal/stats"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/egress"
	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local"
)

func main() {
	runs := flag.Int("runs", 10, "runs of each measure")
	agent := flag.String("agent", "bin/space-agent", "static space-agent binary")
	dataDir := flag.String("data-dir", "", "data dir (default: a temporary one, removed after)")
	accel := flag.String("accel", "auto", "auto, kvm or tcg")
	cold := flag.Bool("cold", true, "measure cold boot too (slow)")
	verbose := flag.Bool("v", false, "debug logs on stderr, and a table of the phases of each create and wake")
	flag.BoolVar(&wakePool, "wake-pool", true, "wakes take VMMs started ahead (local.Config.WakePoolSize); false to compare")
	flag.BoolVar(&networked, "network", false, "sandboxes get a network namespace, tap and egress (deny-all), as spaced gives them")
	only := flag.String("only", "", "comma-separated subset of measures: cold, nopool, lifecycle, pool (default all)")
	flag.Parse()
	if *verbose {
		logLevel = slog.LevelDebug
	}
	measures = map[string]bool{"cold": *cold, "nopool": true, "lifecycle": true, "pool": true}
	if *only != "" {
		measures = map[string]bool{}
		for _, m := range strings.Split(*only, ",") {
			measures[strings.TrimSpace(m)] = true
		}
	}
	if err := run(*runs, *agent, *dataDir, *accel); err != nil {
		fmt.Fprintln(os.Stderr, "bench/snapshots:", err)
		os.Exit(1)
	}
}

var (
	logLevel = slog.LevelWarn
	wakePool bool
	// networked: see the -network flag.
	networked bool
	measures  map[string]bool
	// phases collects the worker's phase records of the measured creates
	// and wakes (printed with -v).
	phases *stats.Phases
)

type bench struct {
	ctx  context.Context
	root string // the storage root, where sandboxes' files are
	runs int
	seq  int
}

func run(runs int, agent, dataDir, accel string) error {
	ctx := context.Background()
	phases = stats.NewPhases(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel}),
		"create phases", "wake phases", "agent link up", "vmm started")
	log := slog.New(phases)
	r, err := rig.Open(ctx, agent, dataDir, accel, log)
	if err != nil {
		return err
	}
	defer r.Close()
	cfg := r.Config
	if networked {
		mgr := network.New(ctx, network.Config{Logger: log, Instance: fmt.Sprintf("bench%d", os.Getpid())})
		eg := egress.New(egress.Config{Logger: log, Forbidden: []netip.Prefix{network.GuestPrefix}})
		defer func() {
			_ = eg.Close(context.Background())
			_ = mgr.Close(context.Background())
		}()
		cfg.Network, cfg.Egress = mgr, eg
	}
	b := &bench{ctx: ctx, runs: runs, root: cfg.Storage.Root()}
	var out []stats.Series

	if measures["cold"] {
		cold := cfg
		cold.DisableSnapshots = true
		wc, err := local.New(ctx, cold)
		if err != nil {
			return err
		}
		s, err := b.createToFirst(wc, "cold boot to first command (256 MiB)", spec("", 256))
		wc.Close()
		if err != nil {
			return err
		}
		out = append(out, s...)
	}

	// Without pools: every create restores on the request path. Template
	// disk size and guest memory must not change the cost (reflinks, and
	// guest RAM in a shared memory file that is not copied).
	nopool := cfg
	nopool.PoolSize = -1
	if !wakePool {
		nopool.WakePoolSize = -1
	}
	wn, err := local.New(ctx, nopool)
	if err != nil {
		return err
	}
	nopoolCases := []struct {
		name      string
		mem, disk int
	}{
		{"create to first command, no pool (256 MiB, template disk)", 256, 0},
		{"create to first command, no pool (2 GiB memory)", 2048, 0},
		{"create to first command, no pool (64 MiB disk)", 256, 64},
		{"create to first command, no pool (2 GiB disk)", 256, 2048},
	}
	if !measures["nopool"] {
		nopoolCases = nil
	}
	for _, c := range nopoolCases {
		sp := spec("", c.mem)
		sp.DiskMiB = c.disk
		if err := wn.PrepareTemplate(ctx, sp); err != nil {
			return err
		}
		s, err := b.createToFirst(wn, c.name, sp)
		if err != nil {
			return err
		}
		out = append(out, s...)
	}
	for _, mem := range []int{256, 1024} {
		if !measures["lifecycle"] {
			break
		}
		if err := wn.PrepareTemplate(ctx, spec("", mem)); err != nil {
			return err
		}
		ss, err := b.lifecycle(wn, mem)
		if err != nil {
			return err
		}
		out = append(out, ss...)
	}
	wn.Close()

	// With pools (the default): a restored, warmed VM waits per template.
	// One worker per size, so that its pool holds that template only.
	for _, mem := range []int{256, 2048} {
		if !measures["pool"] {
			break
		}
		w, err := local.New(ctx, cfg)
		if err != nil {
			return err
		}
		if err := w.PrepareTemplate(ctx, spec("", mem)); err != nil {
			return err
		}
		s, err := b.createToFirst(w, fmt.Sprintf("create to first command, pool (%d MiB)", mem), spec("", mem))
		w.Close()
		if err != nil {
			return err
		}
		out = append(out, s...)
	}
	if s, ok := b.runsc(); ok {
		out = append(out, s)
	}
	fmt.Printf("bench/snapshots: %d runs, accel=%s, kernel %s, 1 vCPU, base template, network=%v, wake-pool=%v\n",
		runs, accel, r.Kernel.Version, networked, wakePool)
	stats.Print(os.Stdout, out...)
	if logLevel == slog.LevelDebug {
		fmt.Printf("\nphases (worker debug records; wake: verify runs beside clone..incoming; agent link up: dial + sync, inside link_configure, link_thaw_configure or configure)\n")
		stats.Print(os.Stdout, phases.Series()...)
	}
	return nil
}

func spec(id string, mem int) worker.SandboxSpec {
	return worker.SandboxSpec{ID: id, Template: template.BaseName, VCPUs: 1, MemoryMiB: mem}
}

func (b *bench) id() string {
	b.seq++
	return fmt.Sprintf("sbx_bench%d", b.seq)
}

// createToFirst: CreateSandbox, then `true` run to its exit.
// It returns the totals and, as a second series, the first command's part.
func (b *bench) createToFirst(w *local.Worker, name string, sp worker.SandboxSpec) ([]stats.Series, error) {
	s := stats.Series{Name: name, Unit: "ms"}
	first := stats.Series{Name: "  of which the first command", Unit: "ms"}
	cpu := stats.Series{Name: "  VMM CPU time, start to first command's exit", Unit: "ms"}
	faults := stats.Series{Name: "  VMM page faults read from disk, same span", Unit: "count"}
	all := func() []stats.Series { return []stats.Series{s, first, cpu, faults} }
	for range b.runs {
		id := b.id()
		// Steady state: a pooled VM is ready when the request comes (the
		// pool refills in the background between requests).
		for deadline := time.Now().Add(30 * time.Second); w.PoolStats().Made > 0 && w.PoolStats().Ready < 2 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		t0 := time.Now()
		sp.ID = id
		phases.SetActive(true)
		_, err := w.CreateSandbox(b.ctx, sp)
		phases.SetActive(false)
		if err != nil {
			return all(), err
		}
		c, err := w.Agent(b.ctx, id)
		if err != nil {
			return all(), err
		}
		tc := time.Since(t0)
		if err := runTrue(b.ctx, c, "first"); err != nil {
			return all(), err
		}
		s.AddDuration(time.Since(t0))
		first.AddDuration(time.Since(t0) - tc)
		if st, err := w.Sandbox(b.ctx, id); err == nil {
			// A pooled VM ran before the request: its counters say nothing.
			if vc, err := stats.ReadProcCounters(st.VMMPID); err == nil && w.PoolStats().Made == 0 {
				cpu.Samples = append(cpu.Samples, vc.CPUMS)
				faults.Samples = append(faults.Samples, vc.Majflt)
			}
		}
		if logLevel == slog.LevelDebug {
			fmt.Fprintf(os.Stderr, "%s: create %v, first command %v\n", id, tc, time.Since(t0)-tc)
			t1 := time.Now()
			_ = runTrue(b.ctx, c, "second")
			fmt.Fprintf(os.Stderr, "%s: second command %v\n", id, time.Since(t1))
		}
		if err := w.DeleteSandbox(b.ctx, id); err != nil {
			return all(), err
		}
	}
	return all(), nil
}

// lifecycle times pause, wake from pause, suspend, wake from suspend (to the
// first command) and checkpoint stop time on one sandbox.
func (b *bench) lifecycle(w *local.Worker, mem int) ([]stats.Series, error) {
	sfx := fmt.Sprintf(" (%d MiB)", mem)
	pause := stats.Series{Name: "pause" + sfx, Unit: "ms"}
	wakeP := stats.Series{Name: "wake from pause" + sfx, Unit: "ms"}
	susp := stats.Series{Name: "suspend" + sfx, Unit: "ms"}
	wakeS := stats.Series{Name: "wake from suspend to first command" + sfx, Unit: "ms"}
	ckpt := stats.Series{Name: "checkpoint vCPU stop" + sfx, Unit: "ms"}
	firstW := stats.Series{Name: "  of which the first command" + sfx, Unit: "ms"}
	cpuW := stats.Series{Name: "  VMM CPU time, start to first command's exit" + sfx, Unit: "ms"}
	faultW := stats.Series{Name: "  VMM page faults read from disk, same span" + sfx, Unit: "count"}
	snapMB := stats.Series{Name: "suspend snapshot size" + sfx, Unit: "MB"}
	// Where the first command's time goes: the same command again (warm
	// TCG translation cache, warm guest), and how much of the memory file
	// is in the page cache when the wake returns and after the command.
	secondW := stats.Series{Name: "  a second command after the first" + sfx, Unit: "ms"}
	resWake := stats.Series{Name: "  memory file in page cache when woken" + sfx, Unit: "MiB"}
	resFirst := stats.Series{Name: "  memory file in page cache after the first command" + sfx, Unit: "MiB"}
	id := b.id()
	memPath := filepath.Join(b.root, "sandboxes", id, "memory")
	if _, err := w.CreateSandbox(b.ctx, spec(id, mem)); err != nil {
		return nil, err
	}
	defer w.DeleteSandbox(b.ctx, id)
	c, err := w.Agent(b.ctx, id)
	if err != nil {
		return nil, err
	}
	// Some memory in use, as a real workload would have.
	if err := runShell(b.ctx, c, "fill", "head -c 33554432 /dev/urandom > /tmp/fill"); err != nil {
		return nil, err
	}
	timed := func(s *stats.Series, f func() error) error {
		t0 := time.Now()
		err := f()
		s.AddDuration(time.Since(t0))
		return err
	}
	for i := range b.runs {
		if err := timed(&pause, func() error { _, err := w.PauseSandbox(b.ctx, id); return err }); err != nil {
			return nil, err
		}
		if err := timed(&wakeP, func() error { _, err := w.WakeSandbox(b.ctx, id); return err }); err != nil {
			return nil, err
		}
		var st worker.SandboxStatus
		if err := timed(&susp, func() error { st, err = w.SuspendSandbox(b.ctx, id); return err }); err != nil {
			return nil, err
		}
		snapMB.Samples = append(snapMB.Samples, float64(st.SnapshotBytes)/1e6)
		// Steady state: the VMM started ahead for this shape is up when
		// the wake comes (wakes come well after their suspend).
		for deadline := time.Now().Add(30 * time.Second); wakePool && w.WakePoolStats().Ready < 1 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if err := timed(&wakeS, func() error {
			phases.SetActive(true)
			_, err := w.WakeSandbox(b.ctx, id)
			phases.SetActive(false)
			if err != nil {
				return err
			}
			if mib, err := residentMiB(memPath); err == nil {
				resWake.Samples = append(resWake.Samples, mib)
			}
			t1 := time.Now()
			err = runTrue(b.ctx, c, fmt.Sprintf("w%d", i))
			firstW.AddDuration(time.Since(t1))
			if mib, err := residentMiB(memPath); err == nil {
				resFirst.Samples = append(resFirst.Samples, mib)
			}
			if st, serr := w.Sandbox(b.ctx, id); serr == nil {
				if vc, verr := stats.ReadProcCounters(st.VMMPID); verr == nil {
					cpuW.Samples = append(cpuW.Samples, vc.CPUMS)
					faultW.Samples = append(faultW.Samples, vc.Majflt)
				}
			}
			return err
		}); err != nil {
			return nil, err
		}
		t2 := time.Now()
		if err := runTrue(b.ctx, c, fmt.Sprintf("w%d-second", i)); err != nil {
			return nil, err
		}
		secondW.AddDuration(time.Since(t2))
		ck, err := w.Checkpoint(b.ctx, id, fmt.Sprintf("ckpt_%s_%d", id, i))
		if err != nil {
			return nil, err
		}
		ckpt.AddDuration(ck.Paused)
		if err := w.DeleteCheckpoint(b.ctx, ck.ID); err != nil {
			return nil, err
		}
	}
	return []stats.Series{pause, wakeP, susp, wakeS, firstW, secondW, resWake, resFirst, cpuW, faultW, snapMB, ckpt}, nil
}

func (b *bench) runsc() (stats.Series, bool) {
	s := stats.Series{Name: "peer: runsc --network=none do true", Unit: "ms"}
	path, err := exec.LookPath("runsc")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/snapshots: runsc not installed (Debian package runsc); peer skipped")
		return s, false
	}
	for range b.runs {
		t0 := time.Now()
		if out, err := exec.Command(path, "--network=none", "do", "true").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "bench/snapshots: runsc failed: %v: %s\n", err, out)
			return s, false
		}
		s.AddDuration(time.Since(t0))
	}
	return s, true
}

func runTrue(ctx context.Context, c worker.Guest, id string) error {
	_, err := rig.Run(ctx, c, id, agentproto.ProcessSpec{Argv: []string{"true"}}, nil)
	return err
}

func runShell(ctx context.Context, c worker.Guest, id, script string) error {
	_, err := rig.Run(ctx, c, id, agentproto.ProcessSpec{Shell: script}, nil)
	return err
}
