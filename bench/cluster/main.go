// Command cluster benchmarks cluster mode on this machine against a single
// node, printing medians in bench/internal/stats's table:
//
//   - create, single node: API create → operation succeeded on a `spaced`
//     with its worker in process (SQLite), one sandbox at a time;
//   - create, through the scheduler: the same through a `spaced control`
//     replica (PostgreSQL), kube-scheduler binding the Pod to one of three
//     `spaced worker` nodes (internal/devcluster, the launcher of
//     `make cluster`);
//   - -burst creates in a row through the scheduler (each waited for, then
//     deleted), reported as creates per second;
//   - wake from suspend to first command (256 MiB and 1 GiB) on the single
//     node (its own files), and in the cluster on the same worker and on
//     another one (both from object storage; wake.go).
//
// Before measuring, every worker and the single node make the base
// template's ready snapshot (one create each, not counted).
//
//	go run ./bench/cluster -runs 5 -burst 100
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/space-sandbox/space/bench/internal/apiclient"
	"github.com/space-sandbox/space/bench/internal/stats"
	"github.com/space-sandbox/space/internal/devcluster"
)

func main() {
	runs := flag.Int("runs", 5, "measured creates per setup")
	burst := flag.Int("burst", 100, "creates in a row through the scheduler")
	spaced := flag.String("spaced", "bin/spaced", "spaced binary (space-agent beside it)")
	poolSize := flag.Int("pool-size", 0, "warm pool size of the single node and of every worker")
	flag.Parse()
	if err := run(*spaced, *runs, *burst, *poolSize); err != nil {
		fmt.Fprintln(os.Stderr, "bench/cluster:", err)
		os.Exit(1)
	}
}

func run(spaced string, runs, burst, poolSize int) error {
	pool := fmt.Sprint(poolSize)
	stopSingle, url, singleKey, err := apiclient.StartServer(spaced, "--pool-size", pool, "--accel", "auto")
	if err != nil {
		return fmt.Errorf("single node: %w", err)
	}
	defer stopSingle()
	single := newClient(url, singleKey)
	dir, err := os.MkdirTemp("", "space-bench-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	startCtx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cl, err := devcluster.Start(startCtx, devcluster.Options{
		Dir: dir, Spaced: spaced, ControlAddrs: []string{"127.0.0.1:0"}, Workers: 3,
		WorkerArgs:  []string{"--accel", "auto", "--pool-size", pool},
		ControlArgs: []string{"--quota-sandboxes", "100"},
		Progress:    os.Stderr,
	})
	if err != nil {
		return err
	}
	defer cl.Stop()
	key, err := os.ReadFile(cl.Info.AdminKeyFile)
	if err != nil {
		return err
	}
	control := newClient(cl.ControlURLs()[0], strings.TrimSpace(string(key)))
	ctx := context.Background() // each call below is bounded by its own timeout

	// Ready snapshots first: one create on the single node, one per worker
	// (three at once, which the scheduler spreads over the idle workers).
	if err := warm(ctx, single, 1); err != nil {
		return fmt.Errorf("single node warm-up: %w", err)
	}
	if err := warm(ctx, control, len(cl.Info.Workers)); err != nil {
		return fmt.Errorf("cluster warm-up: %w", err)
	}

	singleSeries := stats.Series{Name: "create, single node", Unit: "ms"}
	clusterSeries := stats.Series{Name: "create, through the scheduler", Unit: "ms"}
	for range runs {
		for _, m := range []struct {
			c *apiclient.Client
			s *stats.Series
		}{{single, &singleSeries}, {control, &clusterSeries}} {
			d, err := createOne(ctx, m.c)
			if err != nil {
				return fmt.Errorf("%s: %w", m.s.Name, err)
			}
			m.s.AddDuration(d)
		}
	}
	var total time.Duration
	burstSeries := stats.Series{Name: fmt.Sprintf("%d creates in a row, each", burst), Unit: "ms"}
	for range burst {
		d, err := createOne(ctx, control)
		if err != nil {
			return fmt.Errorf("creates in a row: %w", err)
		}
		total += d
		burstSeries.AddDuration(d)
	}
	rate := stats.Series{Name: fmt.Sprintf("%d creates in a row", burst), Unit: "creates/s",
		Samples: []float64{float64(burst) / total.Seconds()}}
	fmt.Printf("\nbench/cluster: %d workers of %s, base template, 1 vCPU / 256 MiB, pool size %d\n",
		len(cl.Info.Workers), filepath.Base(spaced), poolSize)
	var nodes []string
	for _, w := range cl.Info.Workers {
		nodes = append(nodes, w.Name)
	}
	wakes, err := wakeSeries(ctx, single, control, cordoner{kube: cl.Kube(), nodes: nodes}, runs)
	if err != nil {
		return err
	}
	stats.Print(os.Stdout, append([]stats.Series{singleSeries, clusterSeries, burstSeries, rate}, wakes...)...)
	return nil
}

// newClient speaks the public API at url with key.
func newClient(url, key string) *apiclient.Client {
	return &apiclient.Client{URL: url, Key: key, HTTP: &http.Client{Timeout: 2 * time.Minute}}
}

// A small sandbox: the creates measured and the warm-ups.
var small = map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256}

// createOne times one create (API call to operation succeeded), then
// deletes the sandbox (not timed).
func createOne(ctx context.Context, c *apiclient.Client) (time.Duration, error) {
	start := time.Now()
	id, err := c.CreateFrom(ctx, small, 10*time.Minute)
	d := time.Since(start)
	if id != "" {
		if derr := c.Delete(id); err == nil {
			err = derr
		}
	}
	return d, err
}

// warm creates n sandboxes at once and deletes them.
func warm(ctx context.Context, c *apiclient.Client, n int) error {
	var ids, ops []string
	defer func() {
		for _, id := range ids {
			c.Delete(id)
		}
	}()
	for range n {
		id, op, err := c.StartCreate(ctx, small)
		if id != "" {
			ids, ops = append(ids, id), append(ops, op)
		}
		if err != nil {
			return err
		}
	}
	for _, op := range ops {
		if err := c.Wait(ctx, op, 10*time.Minute); err != nil {
			return err
		}
	}
	return nil
}
