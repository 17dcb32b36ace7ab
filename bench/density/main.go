// Command density holds idle base sandboxes (256 MiB, 1 vCPU) on this host
// through the HTTP API of a spaced it starts, until a bound: -count
// sandboxes, or the host memory they may take (-mem-fraction of the
// MemAvailable at the start: 0.6 leaves room for the other work of a shared
// host). At every -step sandboxes and at the end it prints the host memory
// one idle sandbox costs, as the PSS of its VMM process (from
// /proc/<pid>/smaps_rollup: guest RAM touched, through the shared mapping
// of its memory file, and QEMU's own memory) and as the drop of
// MemAvailable per sandbox, beside the API's latency with that many
// sandboxes: GET /v1/sandboxes/{id} and a command round trip (exec
// `true`), sequential, over sandboxes in turn, and the host CPU each idle
// VMM burns per second. The first report, with one sandbox, is the API's
// usual latency on this host, and every later one prints its latencies as
// ratios to it. Before each report the run waits -settle, so that the
// create pool's refill after the last create (a restore, which under TCG
// keeps a core busy for seconds) is not what the API is timed against.
//
// With -ksm it turns the kernel's same-page merging on for the run (and
// restores its settings after) and prints what it merged: QEMU marks guest
// RAM mergeable (mem-merge, on by default), but KSM merges only private
// anonymous pages, and a sandbox's guest RAM is a shared file mapping (the
// memory file its snapshots reflink), so the figure shows what it gains.
//
// With -smaps it prints, at the end, one idle VMM's memory by mapping
// class (guest RAM, the TCG translation cache, QEMU's heap and other
// anonymous regions, the binary and libraries): what is TCG's and what a
// KVM host pays as well.
//
// Bounded: -max-time for the whole run, -create-timeout per create; every
// sandbox it made is deleted and the server stopped, on any exit.
//
//	go run ./bench/density -count 25
//	go run ./bench/density -count 100 -ksm
//	go run ./bench/density -count 20 -smaps
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/space-sandbox/space/bench/internal/apiclient"
	"github.com/space-sandbox/space/bench/internal/stats"
)

type config struct {
	spaced        string
	count, step   int
	memFraction   float64
	ksm, smaps    bool
	samples       int
	settle        time.Duration
	createTimeout time.Duration
	maxTime       time.Duration
}

// hardCap bounds -count and the memory bound alike.
const hardCap = 400

func main() {
	var cfg config
	flag.StringVar(&cfg.spaced, "spaced", "bin/spaced", "spaced binary to start")
	flag.IntVar(&cfg.count, "count", 0, "sandboxes to hold (0: until the memory bound)")
	flag.IntVar(&cfg.step, "step", 25, "report every this many sandboxes")
	flag.Float64Var(&cfg.memFraction, "mem-fraction", 0.6, "stop when the sandboxes took this fraction of the MemAvailable at the start")
	flag.BoolVar(&cfg.ksm, "ksm", false, "turn KSM on for the run and report what it merged")
	flag.BoolVar(&cfg.smaps, "smaps", false, "at the end, print one idle VMM's memory by mapping class (QEMU heap, TCG cache, guest RAM, ...)")
	flag.IntVar(&cfg.samples, "samples", 20, "GETs and exec round trips at each report")
	flag.DurationVar(&cfg.settle, "settle", 20*time.Second, "wait before each report, for the create pool's refill to finish")
	flag.DurationVar(&cfg.createTimeout, "create-timeout", 5*time.Minute, "bound on one create")
	flag.DurationVar(&cfg.maxTime, "max-time", 30*time.Minute, "bound on the whole run")
	flag.Parse()
	if cfg.count < 0 || cfg.count > hardCap || cfg.step <= 0 || cfg.memFraction <= 0 || cfg.memFraction > 0.9 || cfg.settle < 0 {
		fmt.Fprintf(os.Stderr, "bench/density: -count 0..%d, -step > 0, -mem-fraction in (0, 0.9], -settle >= 0\n", hardCap)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench/density:", err)
		os.Exit(1)
	}
}

func run(cfg config) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.maxTime)
	defer cancel()
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	if cfg.ksm {
		restore, err := enableKSM()
		if err != nil {
			return err
		}
		defer restore()
	}
	avail0, err := memAvailable()
	if err != nil {
		return err
	}
	budget := int64(float64(avail0) * cfg.memFraction)
	stop, url, key, data, err := apiclient.StartServerData(cfg.spaced,
		"--quota-sandboxes", strconv.Itoa(hardCap+1), "--quota-vcpus", strconv.Itoa(hardCap+1),
		"--quota-memory-mib", strconv.Itoa((hardCap+1)*256),
		// A host loaded by the sandboxes held (and by other work) boots far
		// slower than spaced's default bound allows.
		"--boot-timeout", "10m")
	if err != nil {
		return err
	}
	defer stop()
	c := &apiclient.Client{URL: url, Key: key, HTTP: &http.Client{Timeout: 2 * time.Minute}}
	var ids, held []string // every sandbox made; those that became running
	defer func() {
		for _, id := range ids {
			c.Delete(id)
		}
	}()
	target := cfg.count
	if target == 0 {
		target = hardCap
	}
	fmt.Printf("bench/density: base sandboxes, 256 MiB, 1 vCPU; MemAvailable at start %d MiB, bound: %s; KSM %v\n",
		avail0>>20, bound(cfg, budget), cfg.ksm)
	var reports []report
	why := "count reached"
	for len(ids) < target {
		if ctx.Err() != nil {
			why = "stopped: " + ctx.Err().Error()
			break
		}
		if avail, err := memAvailable(); err == nil && avail0-avail >= budget {
			why = "memory bound reached"
			break
		}
		id, err := c.CreateFrom(ctx, map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256}, cfg.createTimeout)
		if id != "" {
			ids = append(ids, id) // deleted at the end, held or not
		}
		if err != nil {
			why = "create failed: " + err.Error()
			break
		}
		held = append(held, id)
		if len(held) == 1 || len(held)%cfg.step == 0 {
			r, err := measure(ctx, c, data, held, avail0, cfg)
			if err != nil {
				return err
			}
			reports = append(reports, r)
			r.print(os.Stdout, reports[0])
		}
	}
	if len(held) > 0 && (len(reports) == 0 || reports[len(reports)-1].n != len(held)) {
		// The last sandboxes held since a report, as when a create failed.
		if r, err := measure(context.WithoutCancel(ctx), c, data, held, avail0, cfg); err == nil {
			reports = append(reports, r)
			r.print(os.Stdout, reports[0])
		}
	}
	if cfg.smaps && len(held) > 0 {
		if pid, err := vmmPID(data, held[0]); err == nil {
			if err := printSmaps(os.Stdout, pid); err != nil {
				fmt.Fprintln(os.Stderr, "bench/density: smaps:", err)
			}
		}
	}
	fmt.Printf("held %d sandboxes (%s)\n", len(held), why)
	if len(reports) == 0 {
		return fmt.Errorf("no sandbox held")
	}
	return nil
}

func bound(cfg config, budget int64) string {
	if cfg.count > 0 {
		return fmt.Sprintf("%d sandboxes or %d MiB taken", cfg.count, budget>>20)
	}
	return fmt.Sprintf("%d MiB taken (%.0f%% of MemAvailable)", budget>>20, 100*cfg.memFraction)
}

// report is the state with n sandboxes held.
type report struct {
	n         int
	pss       stats.Series // per VMM, MiB
	pssAnon   stats.Series
	pssFile   stats.Series
	availDrop float64 // MiB of MemAvailable per sandbox
	get, exec stats.Series
	idleCPU   stats.Series // per VMM, ms of CPU per second idle
	ksm       string
}

// measure waits cfg.settle, then reads every VMM's memory and times the
// API.
func measure(ctx context.Context, c *apiclient.Client, data string, ids []string, avail0 int64, cfg config) (report, error) {
	r := report{n: len(ids),
		pss:     stats.Series{Name: "  PSS per VMM", Unit: "MiB"},
		pssAnon: stats.Series{Name: "    of which anonymous (QEMU's heap, TCG cache)", Unit: "MiB"},
		pssFile: stats.Series{Name: "    of which file and shmem (guest RAM touched)", Unit: "MiB"},
		get:     stats.Series{Name: "  GET /v1/sandboxes/{id}", Unit: "ms"},
		exec:    stats.Series{Name: "  exec `true` round trip", Unit: "ms"},
		idleCPU: stats.Series{Name: "  idle VMM CPU per sandbox (host CPU the guest burns doing nothing)", Unit: "ms/s"},
	}
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(cfg.settle):
	}
	pids := make([]int, len(ids))
	for i, id := range ids {
		pid, err := vmmPID(data, id)
		if err != nil {
			return r, err
		}
		pids[i] = pid
		m, err := readRollup(pid)
		if err != nil {
			return r, err
		}
		r.pss.Samples = append(r.pss.Samples, m.pss)
		r.pssAnon.Samples = append(r.pssAnon.Samples, m.anon)
		r.pssFile.Samples = append(r.pssFile.Samples, m.file+m.shmem)
	}
	if err := idleCPU(ctx, pids, &r.idleCPU); err != nil {
		return r, err
	}
	if avail, err := memAvailable(); err == nil {
		r.availDrop = float64(avail0-avail) / float64(1<<20) / float64(len(ids))
	}
	for i := 0; i < cfg.samples; i++ {
		id := ids[i%len(ids)]
		t0 := time.Now()
		if err := c.Do(ctx, "GET", "/v1/sandboxes/"+id, nil, nil, 200); err != nil {
			return r, err
		}
		r.get.AddDuration(time.Since(t0))
		t0 = time.Now()
		if err := c.ExecTrue(ctx, id); err != nil {
			return r, err
		}
		r.exec.AddDuration(time.Since(t0))
	}
	r.ksm = ksmState()
	return r, nil
}

// idleWindow is how long idleCPU watches the idle VMMs: long against the
// guests' periodic work (RCU, vmstat, the agent's link keepalive every 10 s)
// and the 10 ms resolution of /proc/<pid>/stat.
const idleWindow = 10 * time.Second

// idleCPU adds each VMM's CPU time per second over idleWindow, with
// nothing asked of any sandbox, to s. Every VMM costs this however idle
// its guest: with enough of them it is what saturates the host.
func idleCPU(ctx context.Context, pids []int, s *stats.Series) error {
	before := make([]float64, len(pids))
	for i, pid := range pids {
		c, err := stats.ReadProcCounters(pid)
		if err != nil {
			return err
		}
		before[i] = c.CPUMS
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(idleWindow):
	}
	secs := time.Since(t0).Seconds()
	for i, pid := range pids {
		c, err := stats.ReadProcCounters(pid)
		if err != nil {
			return err
		}
		s.Samples = append(s.Samples, (c.CPUMS-before[i])/secs)
	}
	return nil
}

// print writes r; base is the first report (one sandbox), whose latencies
// are the API's usual ones on this host.
func (r report) print(w *os.File, base report) {
	fmt.Fprintf(w, "with %d sandboxes: MemAvailable dropped %.1f MiB per sandbox; load %s\n", r.n, r.availDrop, loadAvg())
	stats.Print(w, r.pss, r.pssAnon, r.pssFile, r.idleCPU, r.get, r.exec)
	if r.n != base.n {
		fmt.Fprintf(w, "  latency against %d sandbox: GET median %.2fx, p99 %.2fx; exec median %.2fx, p99 %.2fx\n", base.n,
			ratio(r.get.Median(), base.get.Median()), ratio(stats.Percentile(r.get.Samples, 99), stats.Percentile(base.get.Samples, 99)),
			ratio(r.exec.Median(), base.exec.Median()), ratio(stats.Percentile(r.exec.Samples, 99), stats.Percentile(base.exec.Samples, 99)))
	}
	if r.ksm != "" {
		fmt.Fprintln(w, "  KSM:", r.ksm)
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
