package placement_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/testenv/s3test"
	"github.com/space-sandbox/space/internal/worker"
)

// newRoam is a real object store (SeaweedFS) under a prefix of its own.
func newRoam(t *testing.T) *roamStore {
	t.Helper()
	srv := s3test.New(t, "space-placement")
	loc, err := objstore.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	loc.Prefix = "drain-" + strings.ToLower(rand.Text()[:10])
	store, err := objstore.Open(bounded(t, time.Minute), loc, objstore.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return &roamStore{Snapshots: objstore.Snapshots{Store: store}, dir: t.TempDir()}
}

func (w *testWorker) setHooks(before func(ctx context.Context, id string) error, onDelete func(id string)) {
	w.mu.Lock()
	w.beforeSuspend, w.onDelete = before, onDelete
	w.mu.Unlock()
}

// evict deletes a sandbox's Pod through the Eviction API (policy/v1), as
// kubectl drain does.
func (f *fleet) evict(ctx context.Context, id string) {
	f.t.Helper()
	name, err := k8s.PodName(id)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.client.PolicyV1().Evictions(f.ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}); err != nil {
		f.t.Fatalf("evict %s: %v", name, err)
	}
}

// TestDrainSuspendsBeforeThePodGoes: a cordon and the Eviction API on a
// node with four sandboxes and a drain bound of 2. Each eviction is an
// Exit with Drain set (no loss); at most two suspend at once, by the
// node's own record, while the others wait with their Pods terminating
// and their sandboxes still on the worker; each Pod carries the drain's
// mark before its sandbox's local copy goes; AwaitDrain ends suspended
// (the snapshot in the store), or with the failed suspend's class and
// words for the one whose suspend fails; the wakes land on the other
// node; a sandbox not being drained answers conflict.
func TestDrainSuspendsBeforeThePodGoes(t *testing.T) {
	roam := newRoam(t)
	f := newFleet(t, "drain")
	f.roam, f.drainBound = roam, 2
	a := f.addNode("a", 8, 8192, 8)
	p := f.placement(placement.Config{ScheduleTimeout: 60 * time.Second, Snapshots: roam, DrainGraceSeconds: 120})
	var exits exitLog
	exits.follow(p)
	ctx := bounded(t, 5*time.Minute)
	ids := []string{"sbx_drain_0", "sbx_drain_1", "sbx_drain_2", "sbx_drain_3"}
	failing := ids[3]
	for _, id := range ids {
		if _, err := p.CreateSandbox(ctx, spec(id)); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		pod, err := f.podOf(id)
		if err != nil {
			t.Fatal(err)
		}
		if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g != 120 {
			t.Fatalf("pod of %s: terminationGracePeriodSeconds %v, want 120", id, g)
		}
	}
	b := f.addNode("b", 8, 8192, 8)

	gate := make(chan struct{})
	var mu sync.Mutex
	marks := map[string]string{} // what each Pod carried when its sandbox's local copy first went
	a.w.setHooks(func(ctx context.Context, id string) error {
		if id == failing {
			return errdefs.New(errdefs.ErrResourceExhausted, "the worker's disk is full")
		}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, func(id string) {
		pod, err := f.podOf(id)
		mu.Lock()
		defer mu.Unlock()
		if _, seen := marks[id]; seen {
			return // a repeated delete (virtual-kubelet may ask twice)
		}
		switch {
		case err != nil:
			marks[id] = "no pod: " + err.Error()
		case pod.Annotations[k8s.AnnotationDrained] != "":
			marks[id] = pod.Annotations[k8s.AnnotationDrained]
		default:
			marks[id] = "error " + pod.Annotations[k8s.AnnotationDrainError]
		}
	})

	f.cordon(a.name, true)
	for _, id := range ids {
		f.evict(ctx, id)
	}
	f.eventually(60*time.Second, "two drain suspends at once on node a, the rest waiting", func() (bool, string) {
		c := a.drains.Counts()
		return c.Active == 2 && c.Waiting >= 1, fmt.Sprintf("%+v", c)
	})
	held := 0
	for _, id := range ids[:3] {
		pod, err := f.podOf(id)
		if err != nil || pod.DeletionTimestamp == nil {
			t.Fatalf("pod of %s while its drain waits: %v (deleting: %v), want terminating", id, err, pod != nil && pod.DeletionTimestamp != nil)
		}
		if _, _, marked := k8s.DrainOutcome(pod); marked {
			t.Errorf("pod of %s marked before its suspend: %v", id, pod.Annotations)
		}
		if has, _ := a.w.has(id); has {
			held++
		}
	}
	if held != 3 {
		t.Errorf("worker a holds %d of the 3 sandboxes whose suspend waits, want 3", held)
	}
	f.eventually(30*time.Second, "an Exit with Drain set for each eviction", func() (bool, string) {
		for _, id := range ids {
			if got := exits.of(id); len(got) != 1 || !got[0].Drain || got[0].Err != nil {
				return false, fmt.Sprintf("%s: %+v", id, got)
			}
		}
		return true, ""
	})
	close(gate)

	for _, id := range ids[:3] {
		st, err := p.AwaitDrain(ctx, id)
		if err != nil || st.State != worker.VMSuspended || st.Spec.ID != id || st.Spec.MemoryMiB != 256 {
			t.Fatalf("AwaitDrain %s: %+v, %v; want suspended with its spec", id, st, err)
		}
		if _, _, err := roam.Meta(ctx, worker.SuspendSnapshot(id)); err != nil {
			t.Errorf("snapshot of drained %s: %v", id, err)
		}
	}
	_, err := p.AwaitDrain(ctx, failing)
	if errdefs.ClassOf(err) != errdefs.ErrResourceExhausted || !strings.Contains(err.Error(), "node drain's suspend") ||
		!strings.Contains(err.Error(), "disk is full") {
		t.Errorf("AwaitDrain of the sandbox whose suspend failed: %v (class %v)", err, errdefs.ClassOf(err))
	}
	if st, err := p.Sandbox(ctx, failing); err != nil || st.State != worker.VMStopped || !strings.Contains(st.Lost, "node drain") {
		t.Errorf("Sandbox of the failed drain: %+v, %v; want stopped, lost to the drain", st, err)
	}
	for _, id := range ids {
		f.eventually(30*time.Second, "pod of "+id+" gone", func() (bool, string) {
			_, err := f.podOf(id)
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		if has, _ := a.w.has(id); has {
			t.Errorf("worker a still holds %s after its drain", id)
		}
	}
	mu.Lock()
	for _, id := range ids[:3] {
		if marks[id] != worker.SuspendSnapshot(id) {
			t.Errorf("%s's local copy went while its Pod carried %q, want the drained mark %q", id, marks[id], worker.SuspendSnapshot(id))
		}
	}
	if !strings.HasPrefix(marks[failing], "error resource_exhausted: ") {
		t.Errorf("the failed drain's sandbox went while its Pod carried %q", marks[failing])
	}
	mu.Unlock()
	c := a.drains.Counts()
	t.Logf("node a's drain record: %+v", c)
	if c.Peak != 2 || c.Suspended != 3 || c.Failed != 1 || c.Active != 0 || c.Waiting != 0 {
		t.Errorf("node a's drain record %+v: want peak 2, 3 suspended, 1 failed, none left", c)
	}
	for _, id := range ids {
		for _, ex := range exits.of(id) {
			if !ex.Drain {
				t.Errorf("%s: an Exit other than the drain's: %+v", id, ex)
			}
		}
	}

	for _, id := range ids[:3] {
		st, err := p.WakeSandbox(ctx, id)
		if err != nil || st.State != worker.VMRunning {
			t.Fatalf("wake %s: %+v, %v", id, st, err)
		}
		pod, err := f.podOf(id)
		if err != nil || pod.Spec.NodeName != b.name || !k8s.IsWake(pod) {
			t.Fatalf("woken %s: pod %v on %q, want a wake on %s", id, err, pod.Spec.NodeName, b.name)
		}
	}
	if _, err := p.AwaitDrain(ctx, ids[0]); errdefs.ClassOf(err) != errdefs.ErrConflict {
		t.Errorf("AwaitDrain of a sandbox not being drained: %v, want conflict", err)
	}
}
