package operation_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store"
)

// TestTenantShare: a tenant that floods the engine with long operations
// holds at most its share of the slots; another tenant's operation starts
// at once in a slot left free, while the flood's others stay pending.
func TestTenantShare(t *testing.T) {
	e := newEnv(t)
	other := &store.Tenant{Name: "other"}
	if err := e.store.CreateTenant(e.ctx, other); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	eng := operation.New(operation.Config{Store: e.store, Concurrency: 4, TenantShare: 2, Registerer: reg})
	release := make(chan struct{})
	t.Cleanup(func() {
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Close(ctx)
	})
	started := make(chan *store.Operation, 32)
	eng.Register(store.OpSuspend, func(ctx context.Context, op *store.Operation, _ operation.ProgressFunc) (any, error) {
		started <- op
		select {
		case <-release:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	var flood []*store.Operation
	for i := range 8 {
		flood = append(flood, e.submit(eng, store.OpSuspend, fmt.Sprintf("sbx_flood_%d", i)))
	}
	next := func(what string) *store.Operation {
		t.Helper()
		select {
		case op := <-started:
			return op
		case <-time.After(long):
			t.Fatalf("%s did not start", what)
			return nil
		}
	}
	for range 2 {
		if op := next("the flood's share"); op.TenantID != e.tenant {
			t.Fatalf("started %s of tenant %s", op.ID, op.TenantID)
		}
	}
	calm, err := eng.Submit(e.ctx, &store.Operation{TenantID: other.ID, Type: store.OpSuspend, Target: "sbx_calm"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if op := next("the other tenant's operation"); op.ID != calm.ID {
		t.Fatalf("started %s (tenant %s) before the other tenant's %s: the flood holds more than its share", op.ID, op.TenantID, calm.ID)
	}
	running := 0
	for _, op := range flood {
		cur, err := eng.Wait(e.ctx, e.tenant, op.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if cur.State == store.OpRunning {
			running++
		}
	}
	if running != 2 {
		t.Fatalf("%d of the flood's operations run, want its share of 2", running)
	}
	// Each target's operations run on a goroutine of its own, which may
	// not have reached its tenant's share yet: wait, bounded, for all six.
	want := float64(len(flood) - 2)
	deadline := time.Now().Add(long)
	n := counter(t, reg, "space_operation_tenant_share_waits_total", "")
	for n < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		n = counter(t, reg, "space_operation_tenant_share_waits_total", "")
	}
	if n != want {
		t.Fatalf("tenant share waits = %v, want the flood's %v beyond its share", n, want)
	}
}
