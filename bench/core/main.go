// Command core benchmarks the core of a sandbox on this host, without the
// HTTP API: cold boot to agent ready (clone + VM start + agent configured),
// the round trip of running `true`, and guest→host stdout throughput. It
// prints medians over -runs runs.
//
//	go run ./bench/core -runs 5
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/space-sandbox/space/bench/internal/rig"
	"github.com/space-sandbox/space/bench/internal/stats"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local"
)

func main() {
	runs := flag.Int("runs", 5, "runs of each measure (medians need at least 5)")
	agent := flag.String("agent", "bin/space-agent", "static space-agent binary")
	dataDir := flag.String("data-dir", "", "data dir (default: a temporary one, removed after)")
	accel := flag.String("accel", "auto", "auto, kvm or tcg")
	mib := flag.Int("stdout-mib", 64, "MiB streamed for the throughput measure")
	flag.Parse()
	if err := run(*runs, *agent, *dataDir, *accel, *mib); err != nil {
		fmt.Fprintln(os.Stderr, "bench/core:", err)
		os.Exit(1)
	}
}

func run(runs int, agent, dataDir, accel string, mib int) error {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := rig.Open(ctx, agent, dataDir, accel, log)
	if err != nil {
		return err
	}
	defer r.Close()
	k := r.Kernel
	// DisableSnapshots: every create is a real cold boot, not a restore of
	// the template's ready snapshot (bench/snapshots measures those).
	cfg := r.Config
	cfg.DisableSnapshots = true
	w, err := local.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer w.Close()

	boot := stats.Series{Name: "cold boot to agent ready", Unit: "ms"}
	rtt := stats.Series{Name: "command round trip (true)", Unit: "ms"}
	tput := stats.Series{Name: fmt.Sprintf("stdout guest->host (%d MiB)", mib), Unit: "MB/s"}
	// CPU per MiB streamed, guest (the VMM: under TCG the guest's work is
	// its CPU time) and host (this process: the agent client): on a machine
	// loaded by others these follow the work done, not the contention.
	vmmCPU := stats.Series{Name: "  VMM CPU time per MiB streamed", Unit: "ms"}
	hostCPU := stats.Series{Name: "  host (client) CPU time per MiB streamed", Unit: "ms"}
	rttCPU := stats.Series{Name: "  VMM CPU time per round trip", Unit: "ms"}
	for i := 0; i < runs; i++ {
		id := fmt.Sprintf("sbx_bench%d", i)
		t0 := time.Now()
		if _, err := w.CreateSandbox(ctx, worker.SandboxSpec{ID: id, Template: template.BaseName, VCPUs: 1, MemoryMiB: 256}); err != nil {
			return err
		}
		boot.AddDuration(time.Since(t0))
		c, err := w.Agent(ctx, id)
		if err != nil {
			return err
		}
		st, err := w.Sandbox(ctx, id)
		if err != nil {
			return err
		}
		r0, _ := stats.ReadProcCounters(st.VMMPID)
		for j := 0; j < 5; j++ {
			t1 := time.Now()
			if _, err := rig.Run(ctx, c, fmt.Sprintf("true%d", j), agentproto.ProcessSpec{Argv: []string{"true"}}, nil); err != nil {
				return err
			}
			rtt.AddDuration(time.Since(t1))
		}
		r1, _ := stats.ReadProcCounters(st.VMMPID)
		rttCPU.Samples = append(rttCPU.Samples, (r1.CPUMS-r0.CPUMS)/5)
		h0, _ := stats.ReadProcCounters(0)
		t2 := time.Now()
		n, err := rig.Run(ctx, c, "tput", agentproto.ProcessSpec{
			Shell: fmt.Sprintf("dd if=/dev/zero bs=1048576 count=%d 2>/dev/null", mib), BufferBytes: 64 << 20}, nil)
		if err != nil {
			return err
		}
		if n != int64(mib)<<20 {
			return fmt.Errorf("throughput run delivered %d bytes, want %d", n, int64(mib)<<20)
		}
		tput.Samples = append(tput.Samples, float64(n)/1e6/time.Since(t2).Seconds())
		v2, _ := stats.ReadProcCounters(st.VMMPID)
		h2, _ := stats.ReadProcCounters(0)
		vmmCPU.Samples = append(vmmCPU.Samples, (v2.CPUMS-r1.CPUMS)/float64(mib))
		hostCPU.Samples = append(hostCPU.Samples, (h2.CPUMS-h0.CPUMS)/float64(mib))
		if err := w.DeleteSandbox(ctx, id); err != nil {
			return err
		}
	}
	fmt.Printf("bench/core: %d runs, accel=%s, kernel %s\n", runs, accel, k.Version)
	stats.Print(os.Stdout, boot, rtt, rttCPU, tput, vmmCPU, hostCPU)
	return nil
}
