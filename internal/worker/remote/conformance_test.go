package remote_test

import (
	"testing"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/sim"
	"github.com/space-sandbox/space/internal/worker/workertest"
)

// The client keeps the worker contract the worker it reaches keeps: the
// suite through Client → loopback h2c → Server → the API tests' worker.
func TestConformanceFake(t *testing.T) {
	workertest.Run(t, workertest.Harness{
		New: func(t *testing.T) worker.Worker {
			tok := newToken(t)
			return serve(t, apitest.NewWorker(t), tok).client(t, tok)
		},
		Spec: func(id string) worker.SandboxSpec {
			return worker.SandboxSpec{ID: id, Template: "base", VCPUs: 1, MemoryMiB: 256}
		},
	})
}

// The simulated worker keeps the contract over the worker protocol too,
// as `spaced worker --simulate` serves it.
func TestConformanceSim(t *testing.T) {
	workertest.Run(t, workertest.Harness{
		New: func(t *testing.T) worker.Worker {
			tok := newToken(t)
			w := sim.New(sim.Config{Profile: sim.DefaultProfile()})
			t.Cleanup(func() { w.Close() })
			return serve(t, w, tok).client(t, tok)
		},
		Spec: func(id string) worker.SandboxSpec {
			return worker.SandboxSpec{ID: id, Template: "base", VCPUs: 1, MemoryMiB: 256}
		},
	})
}
