package placement_test

import (
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/testenv/s3test"
	"github.com/space-sandbox/space/internal/worker"
)

// newRoamStore is a roamStore on a SeaweedFS of the test's own.
func newRoamStore(t *testing.T) *roamStore {
	t.Helper()
	srv := s3test.New(t, "space-placement")
	loc, err := objstore.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	loc.Prefix = "roam-" + strings.ToLower(rand.Text()[:10])
	store, err := objstore.Open(bounded(t, time.Minute), loc, objstore.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return &roamStore{Snapshots: objstore.Snapshots{Store: store}, dir: t.TempDir()}
}

// TestWakeRacesWorkerDeath: a sandbox suspended to object storage is woken
// right after its old worker died, while that node still reads Ready, and
// kube-scheduler binds the wake's Pod there. The wake does not end with
// the lost Pod: once Kubernetes reads the node NotReady the Pod is placed
// again, off that node, and the wake runs on the live one.
func TestWakeRacesWorkerDeath(t *testing.T) {
	roam := newRoamStore(t)
	f := newFleet(t, "wakelost")
	f.roam = roam
	a, b := f.addNode("a", 4, 4096, 4), f.addNode("b", 4, 4096, 4)
	p := f.placement(placement.Config{ScheduleTimeout: 60 * time.Second, Snapshots: roam})
	const id = "sbx_wakelost_1"
	ctx := bounded(t, 4*time.Minute)

	// Created and suspended on a.
	f.cordon(b.name, true)
	if _, err := p.CreateSandbox(ctx, spec(id)); err != nil {
		t.Fatal(err)
	}
	if st, err := p.SuspendSandbox(ctx, id); err != nil || st.State != worker.VMSuspended {
		t.Fatalf("suspend: %+v, %v", st, err)
	}

	// a's worker dies; its node still reads Ready for a while, and b is
	// cordoned, so the wake's first Pod is bound to a.
	f.stop(a)
	type result struct {
		st  worker.SandboxStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := p.WakeSandbox(ctx, id)
		done <- result{st, err}
	}()
	f.eventually(30*time.Second, "the wake's pod bound to the dead node", func() (bool, string) {
		pod, err := f.podOf(id)
		if err != nil {
			return false, err.Error()
		}
		return pod.Spec.NodeName == a.name, fmt.Sprintf("on %q", pod.Spec.NodeName)
	})
	f.cordon(b.name, false)

	var r result
	select {
	case r = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the wake did not end in 3 minutes")
	}
	if r.err != nil || r.st.State != worker.VMRunning || !r.st.Restored {
		t.Fatalf("wake after the worker's death: %+v, %v; want running, restored", r.st, r.err)
	}
	pod, err := f.podOf(id)
	if err != nil || pod.Spec.NodeName != b.name {
		t.Fatalf("woken pod on %q (%v), want %s", pod.Spec.NodeName, err, b.name)
	}
	if has, n := b.w.has(id); !has || n != 1 {
		t.Fatalf("%s has it %v, created %d", b.name, has, n)
	}
	if err := p.DeleteSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
}
