// Command api is a bounded load benchmark of the HTTP API of a real spaced:
// p50/p99 of GET /v1/sandboxes/{id} and of a command round trip (POST exec
// of `true`) with -clients concurrent clients, and time-to-ready of
// -creates concurrent creates with their success rate. Before that it
// measures create to first command (API create → operation succeeded →
// `true` exited 0), one sandbox at a time, -first-runs times with pools
// (--pool-size -pool-size) and as many without (--pool-size 0, a second
// spaced), waiting for a full pool before each pooled run.
//
// By default it starts bin/spaced on a temporary data dir and stops it (and
// deletes its sandboxes) afterwards; -url and -key point it at a running
// server instead (then create to first command is measured once, with
// whatever pools that server keeps).
//
//	go run ./bench/api -clients 50 -requests 2000 -creates 20
//	go run ./bench/api -load=false -first-runs 15
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/space-sandbox/space/bench/internal/apiclient"
	"github.com/space-sandbox/space/bench/internal/stats"
)

type config struct {
	url, key, spaced       string
	clients, requests      int
	execs, creates         int
	createTimeout, maxTime time.Duration
	load                   bool
	firstRuns, poolSize    int
}

func main() {
	var cfg config
	flag.StringVar(&cfg.url, "url", "", "server URL (default: start bin/spaced on a temporary data dir)")
	flag.StringVar(&cfg.key, "key", os.Getenv("SPACE_API_KEY"), "API key (with -url)")
	flag.StringVar(&cfg.spaced, "spaced", "bin/spaced", "spaced binary to start")
	flag.IntVar(&cfg.clients, "clients", 50, "concurrent clients")
	flag.IntVar(&cfg.requests, "requests", 2000, "GET requests in all")
	flag.IntVar(&cfg.execs, "execs", 500, "command round trips in all")
	flag.IntVar(&cfg.creates, "creates", 20, "concurrent sandbox creates")
	flag.DurationVar(&cfg.createTimeout, "create-timeout", 5*time.Minute, "bound on one create")
	flag.DurationVar(&cfg.maxTime, "max-time", 20*time.Minute, "bound on the whole run")
	flag.BoolVar(&cfg.load, "load", true, "run the load measures (GET, exec, concurrent creates)")
	flag.IntVar(&cfg.firstRuns, "first-runs", 10, "create-to-first-command runs with and without pools (0 skips)")
	flag.IntVar(&cfg.poolSize, "pool-size", 2, "--pool-size of the pooled server (and the pooled VMs awaited before each run)")
	flag.Parse()
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench/api:", err)
		os.Exit(1)
	}
}

func run(cfg config) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.maxTime)
	defer cancel()
	var first []stats.Series
	var notes []string
	if cfg.firstRuns > 0 {
		var err error
		if first, notes, err = measureFirst(ctx, cfg); err != nil {
			return err
		}
	}
	if !cfg.load {
		fmt.Println("bench/api: create to first command, sequential")
		stats.Print(os.Stdout, first...)
		for _, n := range notes {
			fmt.Println(n)
		}
		return nil
	}
	if cfg.url == "" {
		stop, url, key, err := apiclient.StartServer(cfg.spaced, "--pool-size", strconv.Itoa(cfg.poolSize))
		if err != nil {
			return err
		}
		defer stop()
		cfg.url, cfg.key = url, key
	}
	c := &client{&apiclient.Client{URL: cfg.url, Key: cfg.key, HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.clients * 2}}}}
	sbx, err := c.Create(ctx, cfg.createTimeout)
	if err != nil {
		return fmt.Errorf("first sandbox: %w", err)
	}
	defer c.Delete(sbx)

	get := stats.Series{Name: fmt.Sprintf("GET /v1/sandboxes/{id}, %d clients", cfg.clients), Unit: "ms"}
	getErrs := load(ctx, cfg.clients, cfg.requests, &get, func() error {
		return c.Do(ctx, "GET", "/v1/sandboxes/"+sbx, nil, nil, 200)
	})
	execRT := stats.Series{Name: fmt.Sprintf("exec `true` round trip, %d clients", cfg.clients), Unit: "ms"}
	execErrs := load(ctx, cfg.clients, cfg.execs, &execRT, func() error {
		var res struct {
			ExitCode *int `json:"exit_code"`
		}
		if err := c.Do(ctx, "POST", "/v1/sandboxes/"+sbx+"/exec", map[string]any{"argv": []string{"true"}}, &res, 200); err != nil {
			return err
		}
		if res.ExitCode == nil || *res.ExitCode != 0 {
			return fmt.Errorf("true exited %v", res.ExitCode)
		}
		return nil
	})

	ready := stats.Series{Name: fmt.Sprintf("time to ready, %d concurrent creates", cfg.creates), Unit: "ms"}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var ok int
	var created []string
	var firstErr error
	for i := 0; i < cfg.creates; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			id, err := c.Create(ctx, cfg.createTimeout)
			mu.Lock()
			defer mu.Unlock()
			if id != "" {
				created = append(created, id)
			}
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			ok++
			ready.AddDuration(time.Since(t0))
		}()
	}
	wg.Wait()
	for _, id := range created {
		c.Delete(id)
	}

	fmt.Printf("bench/api against %s\n", cfg.url)
	stats.Print(os.Stdout, append(first, get, execRT, ready)...)
	for _, n := range notes {
		fmt.Println(n)
	}
	fmt.Printf("errors: GET %d/%d, exec %d/%d; creates succeeded %d/%d (%.0f%%)\n",
		getErrs, cfg.requests, execErrs, cfg.execs, ok, cfg.creates, 100*float64(ok)/float64(cfg.creates))
	if firstErr != nil {
		fmt.Printf("first create error: %v\n", firstErr)
	}
	return nil
}

// load runs n calls of fn over workers goroutines and records latencies of
// the successful ones; it returns the number of failures.
func load(ctx context.Context, workers, n int, s *stats.Series, fn func() error) int {
	var next, failed atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				t0 := time.Now()
				if err := fn(); err != nil {
					failed.Add(1)
					continue
				}
				d := time.Since(t0)
				mu.Lock()
				s.AddDuration(d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return int(failed.Load())
}

// client is the API client of package apiclient, with the pool gauge
// reads of this bench (first.go).
type client struct{ *apiclient.Client }
