package remote_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local"
	"github.com/space-sandbox/space/internal/worker/workertest"
)

// The contract holds through the protocol with real VMs: Client →
// loopback h2c → Server → the local worker, as `spaced worker` runs it.
// One local worker serves every subtest (a new server and client each
// time, over a worker emptied first), so the template's ready snapshot is
// made once: the local worker's own suite checks fresh workers.
func TestConformanceLocal(t *testing.T) {
	lw := newLocalWorker(t)
	workertest.Run(t, workertest.Harness{
		New: func(t *testing.T) worker.Worker {
			empty(t, lw)
			tok := newToken(t)
			return serve(t, lw, tok).client(t, tok)
		},
		Spec: func(id string) worker.SandboxSpec {
			return worker.SandboxSpec{ID: id, Template: "base", VCPUs: 1, MemoryMiB: 256}
		},
	})
}

// empty deletes every sandbox and checkpoint w holds.
func empty(t testing.TB, w *local.Worker) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sbs, err := w.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sbs {
		if err := w.DeleteSandbox(ctx, s.ID); err != nil {
			t.Errorf("delete %s: %v", s.ID, err)
		}
	}
	cks, err := w.Checkpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cks {
		if err := w.DeleteCheckpoint(ctx, c.ID); err != nil {
			t.Errorf("delete checkpoint %s: %v", c.ID, err)
		}
	}
}

// newLocalWorker opens a local worker over a fresh reflink volume; the
// test's cleanup deletes what it holds and closes it.
func newLocalWorker(t testing.TB) *local.Worker {
	testenv.RequireVM(t)
	art := testenv.Boot(t)
	vol := testenv.NewVolume(t, art.Agent)
	level := slog.LevelInfo
	if os.Getenv("SPACE_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	w, err := local.New(context.Background(), local.Config{
		Storage: vol.Storage, Driver: testenv.Driver(t), Kernel: art.Kernel.Vmlinuz, Initrd: art.Initrd,
		TemplatesDir: vol.TemplatesDir, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		empty(t, w)
		w.Close()
	})
	return w
}
