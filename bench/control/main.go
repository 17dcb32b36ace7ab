// Command control is the control-plane benchmark: it starts a single-node
// spaced with SQLite and the simulated worker (`spaced --simulate`,
// docs/simulate.md: no VMs, so what it measures is the API, operations
// and the store) and drives its HTTP API as tenants do: -clients
// concurrent clients create -sandboxes sandboxes, each POST with an
// Idempotency-Key (retried with the same key on a transient failure) and
// its operation long-polled to running. With those sandboxes live it
// measures GET /v1/sandboxes/{id} (-reads in all) and one page of
// GET /v1/sandboxes (-lists in all, -page-size each), and the server's
// resident memory per 1,000 live sandboxes (after a forced collection,
// the growth over the server before the creates).
//
// It prints a table and, with -json, ends with one JSON object (API.md,
// "Benchmarks that print figures"). -pprof FILE writes a CPU profile of
// the server taken during the creates (`go tool pprof -top bin/spaced FILE`).
//
// -mode cluster runs the same load against -replicas `spaced control`
// replicas on PostgreSQL with a Kubernetes control plane and -workers
// `spaced worker --simulate` nodes (internal/devcluster, the launcher of
// `make cluster`; needs root and the kube rig's binaries): the clients
// are spread over the replicas, every create a Pod kube-scheduler binds.
// -server-args go to every replica, -worker-args to every worker.
//
//	go run ./bench/control -clients 32 -sandboxes 2000 -json
//	go run ./bench/control -server-args '--simulate-create-latency 800ms:200ms'
//	go run ./bench/control -mode cluster -replicas 2 -workers 2 -server-args '--operation-concurrency 64'
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/space-sandbox/space/bench/internal/apiclient"
	"github.com/space-sandbox/space/bench/internal/stats"
)

type config struct {
	mode, spaced, serverArgs, pprof string
	workerArgs                      string
	clients, sandboxes, tenants     int
	replicas, workers               int
	reads, lists, pageSize          int
	createTimeout, maxTime          time.Duration
	pprofSeconds                    int
	json                            bool
}

// result is the -json object: API.md's keys, then this bench's own.
type result struct {
	CreatesPerSecond     float64 `json:"creates_per_second"`
	CreateP50Ms          float64 `json:"create_p50_ms"`
	CreateP99Ms          float64 `json:"create_p99_ms"`
	GetP99Ms             float64 `json:"get_p99_ms"`
	ListP99Ms            float64 `json:"list_p99_ms"`
	LiveSandboxes        int     `json:"live_sandboxes"`
	EventsFollowers      int     `json:"events_followers"`
	RSSMiBPer1kSandboxes float64 `json:"rss_mib_per_1k_sandboxes"`
	Replicas             int     `json:"replicas"`
	Workers              int     `json:"workers"`
	Store                string  `json:"store"`

	Mode           string  `json:"mode"`
	Clients        int     `json:"clients"`
	Tenants        int     `json:"tenants"`
	CreateFailures int     `json:"create_failures"`
	CreateRetries  int     `json:"create_retries"`
	GetP50Ms       float64 `json:"get_p50_ms"`
	ListP50Ms      float64 `json:"list_p50_ms"`
	RSSMiB         float64 `json:"rss_mib"`
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/control:", err)
		os.Exit(2)
	}
	if err := run(cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench/control:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("bench/control", flag.ContinueOnError)
	fs.StringVar(&cfg.mode, "mode", "single", "single: one spaced with SQLite and the simulated worker; "+
		"cluster: -replicas spaced control on PostgreSQL, kube-apiserver and kube-scheduler, -workers simulated spaced worker nodes")
	fs.IntVar(&cfg.replicas, "replicas", 1, "control replicas (single: 1)")
	fs.IntVar(&cfg.workers, "workers", 1, "simulated workers (single: 1)")
	fs.StringVar(&cfg.workerArgs, "worker-args", "", "cluster: more spaced worker flags, space-separated (e.g. the --simulate-* knobs)")
	fs.StringVar(&cfg.spaced, "spaced", "bin/spaced", "spaced binary to start")
	fs.StringVar(&cfg.serverArgs, "server-args", "", "more spaced flags (cluster: spaced control flags), space-separated (e.g. the --simulate-* knobs, --operation-concurrency)")
	fs.IntVar(&cfg.clients, "clients", 32, "concurrent clients")
	fs.IntVar(&cfg.tenants, "tenants", 0, "tenants the clients are spread over, each with its own key (0: all as the admin's own tenant); "+
		"the operation engine gives one tenant at most half its slots")
	fs.IntVar(&cfg.sandboxes, "sandboxes", 1000, "sandboxes created, then held live for the reads")
	fs.IntVar(&cfg.reads, "reads", 2000, "GET /v1/sandboxes/{id} in all, at the live count")
	fs.IntVar(&cfg.lists, "lists", 200, "GET /v1/sandboxes (one page) in all, at the live count")
	fs.IntVar(&cfg.pageSize, "page-size", 100, "page_size of the lists")
	fs.DurationVar(&cfg.createTimeout, "create-timeout", 2*time.Minute, "bound on one create, to running")
	fs.DurationVar(&cfg.maxTime, "max-time", 10*time.Minute, "bound on the whole run")
	fs.StringVar(&cfg.pprof, "pprof", "", "write a CPU profile of the server, taken during the creates, to this file")
	fs.IntVar(&cfg.pprofSeconds, "pprof-seconds", 10, "length of the -pprof profile")
	fs.BoolVar(&cfg.json, "json", false, "end with one JSON object of the figures")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case fs.NArg() > 0:
		return config{}, fmt.Errorf("unexpected arguments %v", fs.Args())
	case cfg.mode != "single" && cfg.mode != "cluster":
		return config{}, fmt.Errorf("-mode must be single or cluster, not %q", cfg.mode)
	case cfg.mode == "single" && (cfg.replicas != 1 || cfg.workers != 1):
		return config{}, fmt.Errorf("-mode single runs 1 replica and 1 worker; more need -mode cluster")
	case cfg.mode == "single" && cfg.workerArgs != "":
		return config{}, fmt.Errorf("-worker-args is for -mode cluster; a single node takes -server-args")
	case cfg.replicas < 1 || cfg.workers < 1:
		return config{}, fmt.Errorf("-replicas and -workers must be positive")
	case cfg.tenants < 0:
		return config{}, fmt.Errorf("-tenants must be 0 or more")
	case cfg.clients < 1 || cfg.sandboxes < 1 || cfg.reads < 1 || cfg.lists < 1 || cfg.pageSize < 1:
		return config{}, fmt.Errorf("-clients, -sandboxes, -reads, -lists and -page-size must be positive")
	case cfg.pprofSeconds < 1:
		return config{}, fmt.Errorf("-pprof-seconds must be positive")
	}
	return cfg, nil
}

var debugRE = regexp.MustCompile(`debug_listen=(\S+)`)

// target is what the load runs against: the API's replicas, the admin's
// key, the debug listener of the first replica (its memory), and the
// figures' labels.
type target struct {
	urls             []string
	key              string
	debugURL         string
	workers          int
	store, describes string
}

// room is the quota every tenant gets: the run's sandboxes and more.
func (cfg config) room() int { return cfg.sandboxes + cfg.clients + 10 }

// quotaArgs are the API flags that let the run's creates through.
func (cfg config) quotaArgs() []string {
	room := strconv.Itoa(cfg.room())
	return []string{"--debug-listen", "127.0.0.1:0", "--max-conns-per-client", "0",
		"--quota-sandboxes", room, "--quota-vcpus", room, "--quota-memory-mib", strconv.Itoa(cfg.room() * 256)}
}

func run(cfg config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.maxTime)
	defer cancel()
	var t target
	var stop func()
	var err error
	if cfg.mode == "cluster" {
		t, stop, err = startCluster(ctx, cfg)
	} else {
		t, stop, err = startSingle(cfg)
	}
	if err != nil {
		return err
	}
	defer stop()
	return newBench(cfg, t).measure(ctx, out)
}

// startSingle starts one simulated spaced on SQLite.
func startSingle(cfg config) (target, func(), error) {
	args := append([]string{"--simulate"}, cfg.quotaArgs()...)
	srv, err := apiclient.StartServerProc(cfg.spaced, append(args, strings.Fields(cfg.serverArgs)...)...)
	if err != nil {
		return target{}, nil, err
	}
	debug, err := debugAddress(srv.Log)
	if err != nil {
		srv.Stop()
		return target{}, nil, err
	}
	return target{urls: []string{srv.URL}, key: srv.Key, debugURL: debug, workers: 1, store: "sqlite",
		describes: "single node, SQLite, simulated worker"}, srv.Stop, nil
}

// debugAddress is the debug listener's URL a spaced logged.
func debugAddress(logPath string) (string, error) {
	logText, _ := os.ReadFile(logPath)
	m := debugRE.FindSubmatch(logText)
	if m == nil {
		return "", fmt.Errorf("spaced logged no debug address (%s)", logPath)
	}
	return "http://" + string(m[1]), nil
}

// measure runs the phases and reports them.
func (b *bench) measure(ctx context.Context, out io.Writer) error {
	cfg := b.cfg
	if err := b.setUp(ctx); err != nil {
		return fmt.Errorf("tenants: %w", err)
	}
	if _, err := b.create(ctx, b.tenants[0], -1); err != nil { // a warm-up, outside the figures
		return fmt.Errorf("first create: %w", err)
	}
	rss0, err := b.rss(ctx)
	if err != nil {
		return err
	}
	var profile chan error
	if cfg.pprof != "" {
		profile = make(chan error, 1)
		go func() { profile <- b.cpuProfile(ctx, cfg.pprof, cfg.pprofSeconds) }()
	}
	creates, elapsed := b.creates(ctx)
	if profile != nil {
		if err := <-profile; err != nil {
			return fmt.Errorf("-pprof: %w", err)
		}
	}
	if len(creates.latency.Samples) == 0 {
		return fmt.Errorf("no create succeeded: %v", creates.firstErr)
	}
	rss1, err := b.rss(ctx)
	if err != nil {
		return err
	}
	live := len(b.live)
	get, list := b.reads(ctx)

	r := result{
		CreatesPerSecond: float64(len(creates.latency.Samples)) / elapsed.Seconds(),
		CreateP50Ms:      creates.latency.Median(), CreateP99Ms: stats.Percentile(creates.latency.Samples, 99),
		GetP99Ms: stats.Percentile(get.Samples, 99), ListP99Ms: stats.Percentile(list.Samples, 99),
		GetP50Ms: get.Median(), ListP50Ms: list.Median(),
		LiveSandboxes: live, Replicas: len(b.t.urls), Workers: b.t.workers, Store: b.t.store, Mode: cfg.mode, Clients: cfg.clients, Tenants: len(b.tenants),
		CreateFailures: creates.failed, CreateRetries: creates.retries,
		RSSMiB:               float64(rss1) / (1 << 20),
		RSSMiBPer1kSandboxes: float64(int64(rss1)-int64(rss0)) / (1 << 20) / float64(live) * 1000,
	}
	fmt.Fprintf(out, "bench/control: %s; %d clients of %d tenants, %d live sandboxes\n",
		b.t.describes, cfg.clients, len(b.tenants), live)
	stats.Print(out, creates.latency, get, list)
	fmt.Fprintf(out, "creates: %.1f/s sustained to running (%d in %s), %d failed, %d retried\n",
		r.CreatesPerSecond, len(creates.latency.Samples), elapsed.Round(time.Millisecond), creates.failed, creates.retries)
	fmt.Fprintf(out, "server RSS: %.1f MiB, %.1f MiB per 1,000 live sandboxes (growth over the server before the creates)\n",
		r.RSSMiB, r.RSSMiBPer1kSandboxes)
	if creates.firstErr != nil {
		fmt.Fprintf(out, "first create error: %v\n", creates.firstErr)
	}
	if cfg.json {
		return json.NewEncoder(out).Encode(r)
	}
	return nil
}

// cpuProfile writes the server's CPU profile of the next seconds to path.
func (b *bench) cpuProfile(ctx context.Context, path string, seconds int) error {
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", b.debugURL, seconds), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
