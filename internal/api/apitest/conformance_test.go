package apitest_test

import (
	"testing"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/workertest"
)

// The API tests' worker keeps the contract the real one keeps.
func TestConformance(t *testing.T) {
	workertest.Run(t, workertest.Harness{
		New: func(t *testing.T) worker.Worker { return apitest.NewWorker(t) },
		Spec: func(id string) worker.SandboxSpec {
			return worker.SandboxSpec{ID: id, Template: "base", VCPUs: 1, MemoryMiB: 256}
		},
	})
}
