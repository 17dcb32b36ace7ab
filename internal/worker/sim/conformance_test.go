package sim_test

import (
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/sim"
	"github.com/space-sandbox/space/internal/worker/workertest"
)

// The simulated worker keeps the worker contract, with its default
// latencies (so the suite sees calls that take time).
func TestConformance(t *testing.T) {
	workertest.Run(t, workertest.Harness{
		New: func(t *testing.T) worker.Worker {
			w := sim.New(sim.Config{Profile: sim.DefaultProfile()})
			t.Cleanup(func() { w.Close() })
			return w
		},
		Spec: func(id string) worker.SandboxSpec {
			return worker.SandboxSpec{ID: id, Template: "base", VCPUs: 1, MemoryMiB: 256}
		},
		Timeout: time.Minute,
	})
}
