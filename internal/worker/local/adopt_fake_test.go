package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/worker/local"
)

// TestAdoptionInParallel: after a restart the worker adopts its sandboxes
// several at once, so one whose VMM is slow to answer (up to the adoption
// timeout each) does not hold up all the others. Each fake adoption here
// waits until all run at once (or a bounded while, which one at a time
// always runs out).
func TestAdoptionInParallel(t *testing.T) {
	const n = 6 // below the worker's parallelism
	var mu sync.Mutex
	inFlight, most := 0, 0
	together := make(chan struct{})
	var once sync.Once
	d := &fakeDriver{recover: func(ctx context.Context, stateDir string) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == n {
			once.Do(func() { close(together) })
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight--
			mu.Unlock()
		}()
		t := time.NewTimer(3 * time.Second)
		defer t.Stop()
		select {
		case <-together:
		case <-t.C:
		case <-ctx.Done():
		}
		return nil
	}}
	cfg, _ := fakeEnv(t, d)
	for i := range n {
		id := fmt.Sprintf("sbx_adopt%d", i)
		dir := filepath.Join(cfg.Storage.Root(), "sandboxes", id)
		if err := os.MkdirAll(filepath.Join(dir, "vm"), 0o700); err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(spec(id))
		if err := os.WriteFile(filepath.Join(dir, "sandbox.json"), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w, err := local.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanupAll(t, w) })
	sbs, err := w.Sandboxes(context.Background())
	if err != nil || len(sbs) != n {
		t.Fatalf("adopted %d sandboxes (%v), want %d", len(sbs), err, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if most < 2 {
		t.Fatalf("at most %d adoption at once, want several", most)
	}
	t.Logf("%d sandboxes adopted, up to %d at once", n, most)
}
