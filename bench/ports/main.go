// Command ports benchmarks the port proxy end to end through the HTTP API:
// a client fetches from a server inside a sandbox through a private preview
// URL (Host `{port}-{sandbox_id}.{preview_domain}`, token in
// X-Space-Port-Token), on a single node (`spaced`, the proxy dials the
// guest over the agent link itself) and in cluster mode (internal/devcluster:
// two `spaced control` replicas and one `spaced worker`; each replica
// forwards the connection to the worker over the worker protocol), and
// prints the overhead of the cluster's extra hop:
//
//   - throughput of a -bytes download (default 100 MiB), -runs times,
//     median MiB/s (request sent to last byte read);
//   - latency of a small GET (`/`, 11 bytes), -requests times on a fresh
//     client connection each (a TCP dial to the server and a port
//     connection into the guest each) and as many on one kept-alive client
//     connection, median and p90 ms.
//
// The server in the guest is internal/testenv/portserver, built here with
// `go build` (CGO_ENABLED=0), uploaded with the files API and started as a
// command. With -mode both the setups run at the same time and the
// measures are interleaved, so drifts in the machine's load hit all alike.
// It prints bench/internal/stats's table of every series, then single
// against cluster with the ratio; -json ends with one JSON object.
//
//	go run ./bench/ports -mode both -runs 5 -requests 200
//	go run ./bench/ports -mode single -bytes 10485760 -json
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

type config struct {
	mode, spaced           string
	runs, requests         int
	bytes                  int64
	port                   int
	maxTime, createTimeout time.Duration
	json                   bool
}

// singleMode and clusterMode say which setups -mode runs.
func (c config) singleMode() bool  { return c.mode == "single" || c.mode == "both" }
func (c config) clusterMode() bool { return c.mode == "cluster" || c.mode == "both" }

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/ports:", err)
		os.Exit(2)
	}
	if err := run(cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench/ports:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("bench/ports", flag.ContinueOnError)
	fs.StringVar(&cfg.mode, "mode", "both", "single: one spaced; cluster: a devcluster's two control replicas and a worker; both")
	fs.StringVar(&cfg.spaced, "spaced", "bin/spaced", "spaced binary (space-agent beside it)")
	fs.IntVar(&cfg.runs, "runs", 5, "downloads per setup")
	fs.IntVar(&cfg.requests, "requests", 200, "small GETs per setup, on fresh connections and as many on a kept-alive one")
	fs.Int64Var(&cfg.bytes, "bytes", 100<<20, "size of each download")
	fs.IntVar(&cfg.port, "port", 8080, "port the server in the guest listens on")
	fs.DurationVar(&cfg.createTimeout, "create-timeout", 10*time.Minute, "bound on one sandbox create")
	fs.DurationVar(&cfg.maxTime, "max-time", 40*time.Minute, "bound on the whole run (the cluster's start included)")
	fs.BoolVar(&cfg.json, "json", false, "end with one JSON object of the figures")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case fs.NArg() > 0:
		return config{}, fmt.Errorf("unexpected arguments %v", fs.Args())
	case cfg.mode != "single" && cfg.mode != "cluster" && cfg.mode != "both":
		return config{}, fmt.Errorf("-mode must be single, cluster or both, not %q", cfg.mode)
	case cfg.runs < 1 || cfg.requests < 1:
		return config{}, fmt.Errorf("-runs and -requests must be positive")
	case cfg.bytes < 1:
		return config{}, fmt.Errorf("-bytes must be positive")
	case cfg.port < 1 || cfg.port > 65535:
		return config{}, fmt.Errorf("-port must be in 1-65535, not %d", cfg.port)
	case cfg.maxTime <= 0 || cfg.createTimeout <= 0:
		return config{}, fmt.Errorf("-max-time and -create-timeout must be positive")
	}
	return cfg, nil
}

// run sets up what cfg.mode asks for, measures and reports to out;
// progress goes to progress.
func run(cfg config, out, progress io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.maxTime)
	defer cancel()
	server, err := buildPortServer(ctx)
	if err != nil {
		return err
	}
	defer os.RemoveAll(server.dir)
	var eps []*endpoint
	if cfg.singleMode() {
		ep, stop, err := setUpSingle(ctx, cfg, server.path, progress)
		if err != nil {
			return fmt.Errorf("single node: %w", err)
		}
		defer stop()
		eps = append(eps, ep)
	}
	if cfg.clusterMode() {
		reps, stop, err := setUpCluster(ctx, cfg, server.path, progress)
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		defer stop()
		eps = append(eps, reps...)
	}
	fmt.Fprintf(progress, "bench/ports: measuring %d downloads of %d bytes and 2×%d small GETs per setup\n", cfg.runs, cfg.bytes, cfg.requests)
	if err := measure(ctx, cfg, eps); err != nil {
		return err
	}
	return report(out, cfg, eps)
}
