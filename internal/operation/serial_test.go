package operation_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store"
)

// overlap counts the handlers that run at once on each target, across
// every engine it is registered with, and keeps the most ever seen.
type overlap struct {
	mu   sync.Mutex
	now  map[string]int
	most int
	hold time.Duration
}

func (o *overlap) handler(ctx context.Context, op *store.Operation, _ operation.ProgressFunc) (any, error) {
	o.mu.Lock()
	o.now[op.Target]++
	o.most = max(o.most, o.now[op.Target])
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.now[op.Target]--
		o.mu.Unlock()
	}()
	select {
	case <-time.After(o.hold): // long enough for the other engine's to overlap
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestOneTargetOneAtATimeAcrossEngines: two engines (control replicas) on
// one store get operations on one target at once; their handlers never
// overlap, every operation succeeds, and operations on another target run
// beside them.
func TestOneTargetOneAtATimeAcrossEngines(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			shared := be.open(t)
			tenant := tenantOf(t, shared)
			o := &overlap{now: map[string]int{}, hold: 100 * time.Millisecond}
			engines := []*operation.Engine{
				replica(t, shared, "replica-a", 3*time.Second, nil),
				replica(t, shared, "replica-b", 3*time.Second, nil),
			}
			for _, eng := range engines {
				eng.Register(store.OpPause, o.handler)
			}
			const perEngine = 5
			var ids sync.Map
			var wg sync.WaitGroup
			for i, eng := range engines {
				for j := range perEngine {
					wg.Go(func() {
						target := "sbx_shared"
						if j == 0 {
							target = fmt.Sprintf("sbx_own_%d", i)
						}
						op, err := eng.Submit(ctx, &store.Operation{TenantID: tenant, Type: store.OpPause, Target: target}, nil)
						if err != nil {
							t.Error(err)
							return
						}
						ids.Store(op.ID, eng)
					})
				}
			}
			wg.Wait()
			n := 0
			ids.Range(func(k, v any) bool {
				n++
				op, err := v.(*operation.Engine).Wait(ctx, tenant, k.(string), long)
				if err != nil || op.State != store.OpSucceeded {
					t.Errorf("operation %s = %+v, %v", k, op, err)
				}
				return true
			})
			if n != 2*perEngine {
				t.Fatalf("%d operations submitted, want %d", n, 2*perEngine)
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.most != 1 {
				t.Fatalf("at most %d handlers ran at once on one target, want 1", o.most)
			}
		})
	}
}

// TestTakeOverSurvivesTakerLoss: replica B takes over A's running
// operation and is lost itself while it settles the target; the operation
// stays running (no client reads it ended), another operation on the
// target does not start, and replica C settles it again and ends it. A
// taken-over delete (TakenOver asks for a rerun) ends succeeded, through
// its handler run again.
func TestTakeOverSurvivesTakerLoss(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			shared := be.open(t)
			tenant := tenantOf(t, shared)
			const ttl = 300 * time.Millisecond

			viewA := &replicaStore{Store: shared}
			a := replica(t, viewA, "replica-a", ttl, nil)
			g := newGate()
			defer close(g.release) // A's handlers end with the test
			a.Register(store.OpCreate, g.handler)
			a.Register(store.OpDelete, g.handler)
			create, err := a.Submit(ctx, &store.Operation{TenantID: tenant, Type: store.OpCreate, Target: "sbx_1"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			<-g.started
			del, err := a.Submit(ctx, &store.Operation{TenantID: tenant, Type: store.OpDelete, Target: "sbx_2"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			<-g.started
			viewA.cut(true)

			// B takes both over and stalls in settling them: it is lost
			// (cut from the store) before its hook returns.
			viewB := &replicaStore{Store: shared}
			inHook := make(chan string, 4)
			unblock := make(chan struct{})
			b := replica(t, viewB, "replica-b", ttl, func(ctx context.Context, op *store.Operation) bool {
				inHook <- op.ID
				<-unblock
				return false
			})
			b.Register(store.OpCreate, g.handler)
			b.Register(store.OpDelete, g.handler)
			for range 2 {
				select {
				case <-inHook:
				case <-ctx.Done():
					t.Fatal("B never took over A's operations")
				}
			}
			viewB.cut(true)
			var ranOnC atomic.Int32
			waiting, err := b.Submit(ctx, &store.Operation{TenantID: tenant, Type: store.OpCreate, Target: "sbx_1"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			closeCtx, closeCancel := context.WithTimeout(ctx, time.Second)
			b.Close(closeCtx) // the hook is stuck: close abandons it
			closeCancel()
			close(unblock) // returning now, it finds its engine gone
			for _, id := range []string{create.ID, del.ID} {
				if op, err := shared.GetOperation(ctx, tenant, id); err != nil || op.State != store.OpRunning {
					t.Fatalf("operation %s after its taker was lost = %+v, %v; want still running", id, op, err)
				}
			}

			// C takes over from B: it settles both again, ends the create
			// aborted, runs the delete's handler again to success, and
			// only then starts the operation queued behind the create.
			settled := map[string]int{}
			var mu sync.Mutex
			c := replica(t, shared, "replica-c", ttl, func(ctx context.Context, op *store.Operation) bool {
				mu.Lock()
				settled[op.ID]++
				mu.Unlock()
				if cur, err := shared.GetOperation(ctx, store.AnyTenant, waiting.ID); op.Target == waiting.Target && (err != nil || cur.State != store.OpPending) {
					t.Errorf("operation queued on the target ran while %s was settled: %+v, %v", op.ID, cur, err)
				}
				return op.Type == store.OpDelete
			})
			c.Register(store.OpCreate, func(context.Context, *store.Operation, operation.ProgressFunc) (any, error) {
				ranOnC.Add(1)
				return nil, nil
			})
			c.Register(store.OpDelete, func(context.Context, *store.Operation, operation.ProgressFunc) (any, error) {
				return map[string]string{"deleted": "again"}, nil
			})
			done, err := c.Wait(ctx, tenant, create.ID, long)
			if err != nil || done.State != store.OpFailed || done.Error == nil || done.Error.Code != "aborted" {
				t.Fatalf("the twice taken-over create = %+v, %v; want failed aborted", done, err)
			}
			done, err = c.Wait(ctx, tenant, del.ID, long)
			if err != nil || done.State != store.OpSucceeded || string(done.Result) != `{"deleted":"again"}` {
				t.Fatalf("the twice taken-over delete = %+v, %v; want succeeded by its rerun", done, err)
			}
			done, err = c.Wait(ctx, tenant, waiting.ID, long)
			if err != nil || done.State != store.OpSucceeded || ranOnC.Load() != 1 {
				t.Fatalf("the operation queued behind = %+v, %v (ran %d)", done, err, ranOnC.Load())
			}
			mu.Lock()
			defer mu.Unlock()
			if settled[create.ID] != 1 || settled[del.ID] != 1 {
				t.Fatalf("C settled %v, want each taken-over operation once", settled)
			}
		})
	}
}
