package sim_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/sim"
)

func TestParseLatency(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want sim.Latency
		ok   bool
	}{
		{"800ms", sim.Latency{Median: 800 * time.Millisecond}, true},
		{"1s:250ms", sim.Latency{Median: time.Second, Spread: 250 * time.Millisecond}, true},
		{"0", sim.Latency{}, true},
		{"fast", sim.Latency{}, false},
		{"-1s", sim.Latency{}, false},
		{"1s:-5ms", sim.Latency{}, false},
		{"1s:", sim.Latency{}, false},
	} {
		got, err := sim.ParseLatency(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseLatency(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	for in, ok := range map[string]bool{"0": true, "0.25": true, "1": true, "1.5": false, "-0.1": false, "NaN": false, "x": false} {
		if _, err := sim.ParseFailureRate(in); (err == nil) != ok {
			t.Errorf("ParseFailureRate(%q): %v, want ok %v", in, err, ok)
		}
	}
}

func spec(id string) worker.SandboxSpec {
	return worker.SandboxSpec{ID: id, Template: "base", VCPUs: 1, MemoryMiB: 256}
}

// outcomes creates n sandboxes on a worker with profile p and returns
// which failed.
func outcomes(t *testing.T, p sim.Profile, n int) []bool {
	w := sim.New(sim.Config{Profile: p})
	defer w.Close()
	var failed []bool
	for i := range n {
		_, err := w.CreateSandbox(context.Background(), spec("sbx_"+string(rune('a'+i))))
		if err != nil && errdefs.ClassOf(err) != errdefs.ErrInternal {
			t.Fatalf("create failed with %v, want internal", err)
		}
		failed = append(failed, err != nil)
	}
	return failed
}

// One seed gives one sequence of failures; a failed create leaves nothing.
func TestFailuresSeeded(t *testing.T) {
	p := sim.Profile{Seed: 7, Timings: map[sim.Verb]sim.Timing{sim.VerbCreate: {FailureRate: 0.5}}}
	a, b := outcomes(t, p, 20), outcomes(t, p, 20)
	nfail := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed %d: runs differ at create %d: %v vs %v", p.Seed, i, a, b)
		}
		if a[i] {
			nfail++
		}
	}
	if nfail == 0 || nfail == len(a) {
		t.Errorf("failure rate 0.5 failed %d of %d creates", nfail, len(a))
	}
	w := sim.New(sim.Config{Profile: sim.Profile{Timings: map[sim.Verb]sim.Timing{sim.VerbCreate: {FailureRate: 1}}}})
	if _, err := w.CreateSandbox(context.Background(), spec("sbx_x")); err == nil {
		t.Fatal("create with failure rate 1 succeeded")
	}
	if _, err := w.Sandbox(context.Background(), "sbx_x"); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("failed create left %v", err)
	}
}

// A create's latency is spent, and a cancelled context ends it early
// with nothing left behind.
func TestLatencyAndCancel(t *testing.T) {
	p := sim.Profile{Timings: map[sim.Verb]sim.Timing{sim.VerbCreate: {Latency: sim.Latency{Median: 50 * time.Millisecond}}}}
	w := sim.New(sim.Config{Profile: p})
	defer w.Close()
	t0 := time.Now()
	if _, err := w.CreateSandbox(context.Background(), spec("sbx_a")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 50*time.Millisecond {
		t.Errorf("create took %s, below its 50ms latency", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.CreateSandbox(ctx, spec("sbx_b")); errdefs.ClassOf(err) != errdefs.ErrCancelled {
		t.Errorf("cancelled create: %v", err)
	}
	if _, err := w.Sandbox(context.Background(), "sbx_b"); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("cancelled create left %v", err)
	}
}

func events(t *testing.T, g worker.Guest, id string) (out string, exit *agentproto.ExitStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := g.Events(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return out, exit
		}
		if err != nil {
			t.Fatalf("events of %s: %v", id, err)
		}
		out += string(ev.Data)
		if ev.Type == agentproto.EventExit {
			exit = ev.Exit
		}
	}
}

// The built-in commands: exit codes, stdin through cat, a sleep ended by
// a signal, a suspended guest unavailable, a sleep that goes on after wake.
func TestGuestCommands(t *testing.T) {
	ctx := context.Background()
	w := sim.New(sim.Config{})
	defer w.Close()
	if _, err := w.CreateSandbox(ctx, spec("sbx_g")); err != nil {
		t.Fatal(err)
	}
	g, _ := w.Agent(ctx, "sbx_g")
	start := func(id string, argv ...string) {
		if _, err := g.Start(ctx, agentproto.ProcessSpec{ID: id, Argv: argv, Stdin: argv[0] == "cat"}); err != nil {
			t.Fatal(err)
		}
	}
	start("f", "false")
	if _, st := events(t, g, "f"); st == nil || *st.ExitCode != 1 {
		t.Errorf("false: %+v", st)
	}
	start("c", "cat")
	g.Stdin(ctx, "c", []byte("in"), false)
	g.Stdin(ctx, "c", []byte("put"), true)
	if out, st := events(t, g, "c"); out != "input" || *st.ExitCode != 0 {
		t.Errorf("cat: %q %+v", out, st)
	}
	start("s", "sleep", "600")
	if err := g.Signal(ctx, "s", "TERM"); err != nil {
		t.Fatal(err)
	}
	if _, st := events(t, g, "s"); st.Reason != agentproto.ReasonSignaled || st.Signal != "SIGTERM" {
		t.Errorf("sleep after SIGTERM: %+v", st)
	}
	start("n", "nosuch")
	if out, st := events(t, g, "n"); *st.ExitCode != 127 || out == "" {
		t.Errorf("unknown command: %q %+v", out, st)
	}

	start("z", "sleep", "0.2")
	if _, err := w.SuspendSandbox(ctx, "sbx_g"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.List(ctx); errdefs.ClassOf(err) != errdefs.ErrUnavailable {
		t.Errorf("List while suspended: %v", err)
	}
	if _, err := w.WakeSandbox(ctx, "sbx_g"); err != nil {
		t.Fatal(err)
	}
	if _, st := events(t, g, "z"); st == nil || *st.ExitCode != 0 {
		t.Errorf("sleep across suspend and wake: %+v", st)
	}
	if err := w.DeleteSandbox(ctx, "sbx_g"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.List(ctx); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("List after delete: %v", err)
	}
}

// Output past the buffer bound is evicted and replayed as one gap.
func TestOutputBounded(t *testing.T) {
	ctx := context.Background()
	w := sim.New(sim.Config{})
	defer w.Close()
	w.CreateSandbox(ctx, spec("sbx_o"))
	g, _ := w.Agent(ctx, "sbx_o")
	if _, err := g.Start(ctx, agentproto.ProcessSpec{ID: "c", Argv: []string{"cat"}, Stdin: true, BufferBytes: 10}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		g.Stdin(ctx, "c", []byte("0123456789"), false)
	}
	g.Stdin(ctx, "c", nil, true)
	s, _ := g.Events(ctx, "c", 0)
	defer s.Close()
	ev, err := s.Next()
	if err != nil || ev.Type != agentproto.EventGap || ev.LostBytes != 40 {
		t.Errorf("first event %+v, %v; want a gap of the 40 bytes evicted", ev, err)
	}
}
