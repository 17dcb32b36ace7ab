package operation_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/postgres"
	"github.com/space-sandbox/space/internal/store/sqlite"
	"github.com/space-sandbox/space/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// backends opens the stores control replicas share: SQLite (one node) and
// PostgreSQL (a cluster), both real.
var backends = []struct {
	name string
	open func(t *testing.T) store.Store
}{
	{"sqlite", func(t *testing.T) store.Store {
		s, err := sqlite.Open(filepath.Join(t.TempDir(), "space.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"postgres", func(t *testing.T) store.Store {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := postgres.Open(ctx, pgtest.DSN(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
}

// replicaStore is one replica's view of the shared store: cut() partitions
// it from the lease calls (renewals and take-overs fail as when the
// database is unreachable), and it records when its take-over scans began.
type replicaStore struct {
	store.Store
	mu    sync.Mutex
	isCut bool
	scans []time.Time
}

func (r *replicaStore) cut(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.isCut = on
}

func (r *replicaStore) partitioned() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.isCut
}

func (r *replicaStore) RenewOperationLeases(ctx context.Context, owner string, ids []string, ttl time.Duration) ([]string, error) {
	if r.partitioned() {
		return nil, errdefs.New(errdefs.ErrUnavailable, "partitioned from the store")
	}
	return r.Store.RenewOperationLeases(ctx, owner, ids, ttl)
}

func (r *replicaStore) ClaimExpiredOperations(ctx context.Context, owner string, ttl time.Duration, limit int) ([]*store.Operation, error) {
	if r.partitioned() {
		return nil, errdefs.New(errdefs.ErrUnavailable, "partitioned from the store")
	}
	start := time.Now()
	ops, err := r.Store.ClaimExpiredOperations(ctx, owner, ttl, limit)
	r.mu.Lock()
	r.scans = append(r.scans, start)
	r.mu.Unlock()
	return ops, err
}

// scannedAfter reports whether a take-over scan that began after t has ended.
func (r *replicaStore) scannedAfter(t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.scans) > 0 && r.scans[len(r.scans)-1].After(t)
}

func replica(t *testing.T, s store.Store, owner string, ttl time.Duration, takenOver func(context.Context, *store.Operation) bool) *operation.Engine {
	eng := operation.New(operation.Config{Store: s, Owner: owner, LeaseTTL: ttl, TakenOver: takenOver})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Close(ctx)
	})
	return eng
}

func tenantOf(t *testing.T, s store.Store) string {
	tn := &store.Tenant{Name: "t"}
	if err := s.CreateTenant(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	return tn.ID
}

// TestTakeOverFromLostReplica: replica A runs one operation and has a second
// queued behind it when it loses the store. Its leases run out; replica B
// hands the running one to TakenOver while it still runs, then ends it
// aborted, and runs the queued one itself. When A reaches the store again it finds its lease gone, its
// handler is cancelled, and its late verdict does not overwrite B's.
func TestTakeOverFromLostReplica(t *testing.T) {
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
			handlerDone := make(chan error, 4)
			a.Register(store.OpCreate, func(ctx context.Context, op *store.Operation, report operation.ProgressFunc) (any, error) {
				res, err := g.handler(ctx, op, report)
				handlerDone <- err
				return res, err
			})
			running, err := a.Submit(ctx, &store.Operation{TenantID: tenant, Type: store.OpCreate, Target: "sbx_1"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			<-g.started
			queued, err := a.Submit(ctx, &store.Operation{TenantID: tenant, Type: store.OpCreate, Target: "sbx_1"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if queued.LeaseOwner != "replica-a" {
				t.Fatalf("a submitted operation is leased to %q", queued.LeaseOwner)
			}
			viewA.cut(true)

			taken := make(chan *store.Operation, 4)
			b := replica(t, shared, "replica-b", ttl, func(ctx context.Context, op *store.Operation) bool {
				// The target is settled before the operation ends.
				if cur, err := shared.GetOperation(ctx, store.AnyTenant, op.ID); err != nil || cur.State != store.OpRunning {
					t.Errorf("TakenOver of %s found it %+v, %v: ended before its target was settled", op.ID, cur, err)
				}
				taken <- op
				return false
			})
			var ranOnB atomic.Int32
			b.Register(store.OpCreate, func(ctx context.Context, op *store.Operation, _ operation.ProgressFunc) (any, error) {
				ranOnB.Add(1)
				return map[string]string{"by": "b"}, nil
			})
			select {
			case op := <-taken:
				if op.ID != running.ID || op.State != store.OpRunning || op.LeaseOwner != "replica-b" {
					t.Fatalf("TakenOver got %+v, want the running operation, leased to B", op)
				}
			case <-ctx.Done():
				t.Fatal("B never took over the running operation")
			}
			got, err := b.Wait(ctx, tenant, queued.ID, long)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != store.OpSucceeded || string(got.Result) != `{"by":"b"}` || got.LeaseOwner != "replica-b" {
				t.Fatalf("the queued operation on B: %s %s owner %q", got.State, got.Result, got.LeaseOwner)
			}

			// A reaches the store again: its renewal finds the lease gone
			// and cancels its handler, whose verdict is refused.
			viewA.cut(false)
			select {
			case err := <-handlerDone:
				if err == nil {
					t.Fatal("A's handler finished instead of being cancelled")
				}
			case <-ctx.Done():
				t.Fatal("A never noticed it lost the lease")
			}
			if err := a.Close(ctx); err != nil {
				t.Fatal(err)
			}
			for id, want := range map[string]store.OperationState{running.ID: store.OpFailed, queued.ID: store.OpSucceeded} {
				op, err := shared.GetOperation(ctx, tenant, id)
				if err != nil {
					t.Fatal(err)
				}
				if op.State != want || op.LeaseOwner != "replica-b" {
					t.Fatalf("operation %s ended %s held by %q, want %s held by replica-b", id, op.State, op.LeaseOwner, want)
				}
			}
			if n := ranOnB.Load(); n != 1 {
				t.Fatalf("B ran %d handlers, want 1", n)
			}
			if n := len(g.started); n != 0 {
				t.Fatalf("A started %d more handlers after losing the store", n)
			}
		})
	}
}

// TestRenewedLeaseIsKept: while replica A renews, replica B scans for
// expired leases past the moment A's first lease would have run out and
// takes nothing; a new replica's Recover leaves A's live operation alone.
func TestRenewedLeaseIsKept(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			shared := be.open(t)
			tenant := tenantOf(t, shared)
			// Long enough that a loaded machine renews in time (every ttl/3).
			const ttl = 2 * time.Second

			a := replica(t, shared, "replica-a", ttl, nil)
			g := newGate()
			a.Register(store.OpCreate, g.handler)
			op, err := a.Submit(ctx, &store.Operation{TenantID: tenant, Type: store.OpCreate, Target: "sbx_1"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			<-g.started
			first := op.LeaseExpiresAt

			viewB := &replicaStore{Store: shared}
			b := replica(t, viewB, "replica-b", ttl, func(context.Context, *store.Operation) bool {
				t.Error("B took over a renewed lease")
				return false
			})
			b.Register(store.OpCreate, g.handler)
			// Past A's first deadline (plus the clocks' resolution), by B's scans.
			for !viewB.scannedAfter(first.Add(10 * time.Millisecond)) {
				select {
				case <-ctx.Done():
					t.Fatal("B never scanned past A's first deadline")
				case <-time.After(50 * time.Millisecond):
				}
			}
			cur, err := shared.GetOperation(ctx, tenant, op.ID)
			if err != nil {
				t.Fatal(err)
			}
			if cur.LeaseOwner != "replica-a" || cur.State != store.OpRunning || !cur.LeaseExpiresAt.After(first) {
				t.Fatalf("after A renewed: owner %q, %s, expires %v (first %v)", cur.LeaseOwner, cur.State, cur.LeaseExpiresAt, first)
			}

			c := replica(t, shared, "replica-c", ttl, nil)
			ended, err := c.Recover(ctx)
			if err != nil || len(ended) != 0 {
				t.Fatalf("a new replica's Recover ended %v (%v); A's operation is live", ended, err)
			}
			close(g.release)
			done, err := a.Wait(ctx, tenant, op.ID, long)
			if err != nil || done.State != store.OpSucceeded {
				t.Fatalf("A's operation ended %+v, %v", done, err)
			}
		})
	}
}
