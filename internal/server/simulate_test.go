package server

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
	"github.com/space-sandbox/space/internal/worker/sim"
)

// --simulate and its knobs parse alike for the single node and the
// worker; defaults are sim.DefaultProfile's; bad values are refused.
func TestSimulateFlags(t *testing.T) {
	t.Setenv(StoreEnv, "")
	def, err := ParseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := sim.DefaultProfile()
	if def.Simulate.Enabled || def.Simulate.Profile.Seed != want.Seed || def.Simulate.Profile.Timings[sim.VerbCreate] != want.Timings[sim.VerbCreate] {
		t.Errorf("defaults: %+v", def.Simulate)
	}
	args := []string{"--simulate", "--simulate-create-latency", "800ms:200ms", "--simulate-wake-failure", "0.1", "--simulate-seed", "9",
		"--simulate-guest-disk-mib", "8"}
	single, err := ParseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	wk, err := ParseWorkerFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	for role, c := range map[string]SimulateConfig{"spaced": single.Simulate, "spaced worker": wk.Simulate} {
		p := c.Profile
		if !c.Enabled || p.Seed != 9 || p.GuestDiskMiB != 8 ||
			p.Timings[sim.VerbCreate].Latency != (sim.Latency{Median: 800 * time.Millisecond, Spread: 200 * time.Millisecond}) ||
			p.Timings[sim.VerbWake].FailureRate != 0.1 || p.Timings[sim.VerbSuspend] != want.Timings[sim.VerbSuspend] {
			t.Errorf("%s: %+v", role, c)
		}
	}
	if def.Simulate.Profile.Timings[sim.VerbCreate] != want.Timings[sim.VerbCreate] {
		t.Error("parsing one command line changed another's defaults")
	}
	for _, bad := range [][]string{
		{"--simulate-create-latency", "fast"},
		{"--simulate-delete-latency", "1s:-1s"},
		{"--simulate-pause-failure", "2"},
		{"--simulate", "--simulate-guest-disk-mib", "0"},
	} {
		if _, err := ParseFlags(bad); err == nil {
			t.Errorf("ParseFlags(%v) accepted", bad)
		}
	}
	if _, err := ParseWorkerFlags([]string{"--simulate", "--object-store", "s3://space/p?endpoint=127.0.0.1:9000"}); err == nil ||
		!strings.Contains(err.Error(), "--simulate keeps no object store") {
		t.Errorf("--simulate with --object-store: %v", err)
	}
}

// listenSpy is a slog handler that hands on the listen address of the
// record msg (default "spaced serving").
type listenSpy struct {
	addr chan string
	msg  string
}

func (l listenSpy) Enabled(context.Context, slog.Level) bool { return true }
func (l listenSpy) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l listenSpy) WithGroup(string) slog.Handler            { return l }
func (l listenSpy) Handle(_ context.Context, r slog.Record) error {
	if msg := cmp.Or(l.msg, "spaced serving"); r.Message == msg {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "listen" {
				l.addr <- a.Value.String()
			}
			return true
		})
	}
	return nil
}

// A simulated single node starts without root, a kernel or a VMM, and
// says it is simulated where workers are listed.
func TestRunSimulated(t *testing.T) {
	t.Setenv(StoreEnv, "")
	dir := t.TempDir()
	cfg, err := ParseFlags([]string{"--simulate", "--listen", "127.0.0.1:0", "--data-dir", dir, "--kernel-dir", filepath.Join(dir, "none")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	spy := listenSpy{addr: make(chan string, 1)}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(spy)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not end")
		}
	})
	var addr string
	select {
	case addr = <-spy.addr:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no spaced serving in 30s")
	}
	key, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/admin/workers", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list apiv1.WorkerList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != 200 {
		t.Fatalf("workers: %d, %v", resp.StatusCode, err)
	}
	if len(list.Workers) != 1 || !list.Workers[0].Simulated || list.Workers[0].State != apiv1.WorkerReady {
		t.Errorf("workers %+v, want one ready, simulated", list.Workers)
	}
}

// `spaced worker --simulate` serves the simulated worker over the worker
// protocol without root or a host, with the token file it makes.
func TestRunWorkerSimulated(t *testing.T) {
	dir := t.TempDir()
	cfg, err := ParseWorkerFlags([]string{"--simulate", "--listen", "127.0.0.1:0", "--data-dir", dir, "--simulate-create-latency", "1ms"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	spy := listenSpy{addr: make(chan string, 1), msg: "spaced worker serving the worker protocol"}
	done := make(chan error, 1)
	go func() { done <- RunWorker(ctx, cfg, slog.New(spy)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("RunWorker did not end")
		}
	})
	var addr string
	select {
	case addr = <-spy.addr:
	case err := <-done:
		t.Fatalf("RunWorker: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no worker serving in 30s")
	}
	tok, _, err := remote.EnsureToken(cfg.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := remote.NewClient(remote.ClientConfig{Address: addr, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	if _, err := c.CreateSandbox(cctx, worker.SandboxSpec{ID: "sbx_sim", Template: "base", VCPUs: 1, MemoryMiB: 256}); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Sandbox(cctx, "sbx_sim"); err != nil || st.State != worker.VMRunning {
		t.Errorf("sandbox: %+v, %v", st, err)
	}
	// A control replica records its base from a worker: a simulated one
	// publishes the simulated base, and builds nothing else.
	if m, err := c.BuildTemplate(cctx, remote.TemplateBuild{Base: true}, nil, nil); err != nil || m.Name != "base" || m.Digest != simulatedBase().Digest {
		t.Errorf("base build: %+v, %v", m, err)
	}
	other := remote.TemplateBuild{Request: template.BuildRequest{Name: "py", Source: template.Source{Type: template.SourceOCI, Image: "python:3"}}}
	if _, err := c.BuildTemplate(cctx, other, nil, nil); errdefs.ClassOf(err) != errdefs.ErrFailedPrecondition {
		t.Errorf("a build other than base: %v, want failed_precondition", err)
	}
}
