package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/bench/internal/stats"
	"github.com/space-sandbox/space/internal/testenv"
)

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil || cfg.mode != "both" || cfg.runs != 5 || cfg.requests != 200 || cfg.bytes != 100<<20 || cfg.json {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
	cfg, err = parseFlags([]string{"-mode", "cluster", "-runs", "3", "-requests", "9", "-bytes", "1024", "-json"})
	if err != nil || cfg.mode != "cluster" || cfg.runs != 3 || cfg.requests != 9 || cfg.bytes != 1024 || !cfg.json {
		t.Errorf("parsed %+v, %v", cfg, err)
	}
	if cfg.singleMode() || !cfg.clusterMode() {
		t.Errorf("-mode cluster: single %t, cluster %t", cfg.singleMode(), cfg.clusterMode())
	}
	for _, bad := range [][]string{
		{"-mode", "x"}, {"-runs", "0"}, {"-requests", "-1"}, {"-bytes", "0"}, {"-port", "0"}, {"-port", "65536"},
		{"-max-time", "0s"}, {"extra"},
	} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%v) accepted", bad)
		}
	}
}

// The report pools the two replicas' samples for the cluster, divides
// cluster by single node, and ends with the JSON object.
func TestReport(t *testing.T) {
	ep := func(setup, name string, dl, fresh, kept []float64) *endpoint {
		return &endpoint{setup: setup, name: name, keptDials: 1,
			download: stats.Series{Name: "download, " + name, Unit: "MiB/s", Samples: dl},
			fresh:    stats.Series{Name: "fresh, " + name, Unit: "ms", Samples: fresh},
			kept:     stats.Series{Name: "kept, " + name, Unit: "ms", Samples: kept}}
	}
	eps := []*endpoint{
		ep("single", "single node", []float64{40, 50, 60}, []float64{2, 2, 2, 2}, []float64{1, 1, 1, 1}),
		ep("cluster", "cluster, replica 1", []float64{20}, []float64{4, 4}, []float64{3, 3}),
		ep("cluster", "cluster, replica 2", []float64{30}, []float64{6, 6}, []float64{3, 3}),
	}
	var out bytes.Buffer
	if err := report(&out, config{mode: "both", bytes: 100 << 20, runs: 3, requests: 4, json: true}, eps); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var got result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, out.String())
	}
	if got.Single == nil || got.Cluster == nil || got.Ratio == nil || len(got.Replicas) != 2 {
		t.Fatalf("result %+v: want single, cluster, ratio and 2 replicas", got)
	}
	if got.Single.DownloadMiBPerS != 50 || got.Cluster.DownloadMiBPerS != 25 || got.Ratio.DownloadMiBPerS != 0.5 {
		t.Errorf("download: single %v, cluster %v, ratio %v; want 50, 25 (median of 20 and 30), 0.5",
			got.Single.DownloadMiBPerS, got.Cluster.DownloadMiBPerS, got.Ratio.DownloadMiBPerS)
	}
	if got.Cluster.FreshP50Ms != 5 || got.Ratio.FreshP50Ms != 2.5 || got.Ratio.KeptP90Ms != 3 {
		t.Errorf("latency: cluster fresh p50 %v, ratios fresh p50 %v kept p90 %v; want 5, 2.5, 3",
			got.Cluster.FreshP50Ms, got.Ratio.FreshP50Ms, got.Ratio.KeptP90Ms)
	}
	if !strings.Contains(out.String(), "cluster ÷ single") || !strings.Contains(out.String(), "0.50×") {
		t.Errorf("no ratio column in\n%s", out.String())
	}

	out.Reset()
	if err := report(&out, config{mode: "single", bytes: 100 << 20, runs: 3, requests: 4}, eps[:1]); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "÷") || strings.Contains(out.String(), "{") {
		t.Errorf("-mode single without -json printed a ratio or JSON:\n%s", out.String())
	}
}

// A small single-node run against spaced built from this tree: a real
// sandbox, the port server in it, a preview URL, every series filled.
func TestSmokeSingle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds spaced and boots a sandbox")
	}
	testenv.RequireVM(t)
	dir := t.TempDir()
	root := testenv.ModuleRoot(t)
	for _, b := range []struct{ out, pkg, cgo string }{{"spaced", "./cmd/spaced", "1"}, {"space-agent", "./cmd/space-agent", "0"}} {
		build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, b.out), b.pkg)
		build.Dir = root
		build.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	cfg, err := parseFlags([]string{"-mode", "single", "-spaced", filepath.Join(dir, "spaced"), "-runs", "2", "-requests", "5",
		"-bytes", "1048576", "-max-time", "8m", "-json"})
	if err != nil {
		t.Fatal(err)
	}
	var out, progress bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(cfg, &out, &progress) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s\n%s", err, progress.String(), out.String())
		}
	case <-time.After(9 * time.Minute):
		t.Fatal("the run did not end in 9 minutes")
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var got result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, out.String())
	}
	if got.Single == nil || got.Cluster != nil || got.Single.DownloadMiBPerS <= 0 || got.Single.FreshP50Ms <= 0 || got.Single.KeptP50Ms <= 0 {
		t.Errorf("figures %+v (single %+v): want single node figures only, all positive\n%s", got, got.Single, out.String())
	}
	if strings.Contains(out.String(), "dialled") {
		t.Errorf("the kept-alive connection did not last:\n%s", out.String())
	}
}
