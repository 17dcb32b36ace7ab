package local_test

import (
	"testing"

	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/workertest"
)

// The local worker, with real VMs, keeps the worker contract.
func TestConformance(t *testing.T) {
	workertest.Run(t, workertest.Harness{
		New: func(t *testing.T) worker.Worker {
			w := newEnv(t).open()
			t.Cleanup(func() { cleanupAll(t, w) })
			return w
		},
		Spec: spec,
	})
}
