package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil || cfg.mode != "single" || cfg.clients != 32 || cfg.sandboxes != 1000 || cfg.tenants != 0 {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
	cfg, err = parseFlags([]string{"-clients", "4", "-tenants", "2", "-sandboxes", "9", "-json", "-server-args", "--simulate-seed 3"})
	if err != nil || cfg.clients != 4 || cfg.tenants != 2 || cfg.sandboxes != 9 || !cfg.json || cfg.serverArgs != "--simulate-seed 3" {
		t.Errorf("parsed %+v, %v", cfg, err)
	}
	cfg, err = parseFlags([]string{"-mode", "cluster", "-replicas", "2", "-workers", "3", "-worker-args", "--simulate-seed 2"})
	if err != nil || cfg.replicas != 2 || cfg.workers != 3 || cfg.workerArgs != "--simulate-seed 2" {
		t.Errorf("cluster: parsed %+v, %v", cfg, err)
	}
	for _, bad := range [][]string{
		{"-mode", "x"}, {"-replicas", "2"}, {"-workers", "3"}, {"-worker-args", "--simulate-seed 2"}, {"-mode", "cluster", "-replicas", "0"}, {"-clients", "0"}, {"-tenants", "-1"}, {"-lists", "0"}, {"-pprof-seconds", "0"}, {"extra"},
	} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%v) accepted", bad)
		}
	}
}

// A small run against a simulated spaced built from this tree ends with
// the JSON object API.md names, its counts as asked.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs spaced")
	}
	bin := filepath.Join(t.TempDir(), "spaced")
	build := exec.Command("go", "build", "-o", bin, "github.com/space-sandbox/space/cmd/spaced")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build spaced: %v\n%s", err, out)
	}
	var out bytes.Buffer
	cfg, err := parseFlags([]string{"-spaced", bin, "-clients", "4", "-tenants", "2", "-sandboxes", "20", "-reads", "20", "-lists", "4",
		"-max-time", "2m", "-json", "-server-args", "--simulate-create-latency 20ms:5ms"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run(cfg, &out) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the run did not end in 3 minutes")
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, out.String())
	}
	for _, k := range []string{"creates_per_second", "create_p50_ms", "create_p99_ms", "get_p99_ms", "list_p99_ms", "live_sandboxes",
		"events_followers", "rss_mib_per_1k_sandboxes", "replicas", "workers", "store"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no %s in %v", k, got)
		}
	}
	if got["live_sandboxes"] != float64(21) || got["store"] != "sqlite" || got["create_failures"] != float64(0) {
		t.Errorf("figures %v: want 21 live (20 and the warm-up), sqlite, no failures", got)
	}
}
