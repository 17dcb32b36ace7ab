package placement_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/testenv/s3test"
	"github.com/space-sandbox/space/internal/worker"
)

// roamStore is the real object store (SeaweedFS) the test workers suspend
// to and wake from, as local workers do (a file standing for the VM's
// state, the spec as meta).
type roamStore struct {
	objstore.Snapshots
	dir string // where test workers write what they upload
}

// suspendToStore is a test worker's suspend with an object store: it
// uploads the sandbox's state with its spec, then the sandbox is
// suspended here.
func (w *testWorker) suspendToStore(ctx context.Context, id string) (worker.SandboxStatus, error) {
	st, err := w.Sandbox(ctx, id)
	if err != nil {
		return st, err
	}
	if st.State == worker.VMSuspended {
		return st, nil
	}
	dir, err := os.MkdirTemp(w.roam.dir, "up-")
	if err != nil {
		return st, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "state"), []byte("state of "+id), 0o600); err != nil {
		return st, err
	}
	meta, _ := json.Marshal(st.Spec)
	name := worker.SuspendSnapshot(id)
	if err := w.roam.Delete(ctx, name); err != nil {
		return st, err
	}
	if err := w.roam.Put(ctx, name, dir, []string{"state"}, meta); err != nil {
		return st, err
	}
	return w.move(id, worker.VMSuspended)
}

// createFromStore is a test worker's wake of a sandbox suspended anywhere:
// its spec from the snapshot's meta; the snapshot deleted once it runs.
func (w *testWorker) createFromStore(ctx context.Context, req worker.SandboxSpec) (worker.SandboxStatus, error) {
	if w.roam == nil {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrFailedPrecondition, "no object store")
	}
	meta, _, err := w.roam.Meta(ctx, req.FromSnapshot)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	var spec worker.SandboxSpec
	if err := json.Unmarshal(meta, &spec); err != nil || spec.ID != req.ID {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrDataLoss, "meta %s", meta)
	}
	w.mu.Lock()
	if _, ok := w.vms[spec.ID]; ok {
		w.mu.Unlock()
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrConflict, "sandbox %s exists", spec.ID)
	}
	w.creates[spec.ID]++
	st := &worker.SandboxStatus{ID: spec.ID, State: worker.VMRunning, BootedAt: time.Now(), Restored: true, Spec: spec}
	w.vms[spec.ID] = st
	w.mu.Unlock()
	if err := w.roam.Delete(ctx, req.FromSnapshot); err != nil {
		return worker.SandboxStatus{}, err
	}
	return *st, nil
}

// exitLog collects the Exits of placements.
type exitLog struct {
	mu  sync.Mutex
	got []worker.Exit
}

func (l *exitLog) follow(p *placement.Placement) {
	go func() {
		for ex := range p.Exits() {
			l.mu.Lock()
			l.got = append(l.got, ex)
			l.mu.Unlock()
		}
	}()
}

func (l *exitLog) of(id string) []worker.Exit {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []worker.Exit
	for _, ex := range l.got {
		if ex.SandboxID == id {
			out = append(out, ex)
		}
	}
	return out
}

func (f *fleet) cordon(name string, on bool) {
	f.t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%v}}`, on)
	if _, err := f.client.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		f.t.Fatalf("cordon %s: %v", name, err)
	}
}

// TestSuspendWakeElsewhere: a suspend to object storage deletes the Pod
// with no Exit on either control replica and reads suspended with no
// worker; the wake is a new Pod that kube-scheduler lands on the other
// node; a wake with no room ends resource_exhausted and stays suspended;
// deleting a suspended sandbox removes its snapshot.
func TestSuspendWakeElsewhere(t *testing.T) {
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
	roam := &roamStore{Snapshots: objstore.Snapshots{Store: store}, dir: t.TempDir()}

	f := newFleet(t, "roam")
	f.roam = roam
	a, b := f.addNode("a", 4, 4096, 4), f.addNode("b", 4, 4096, 4)
	p := f.placement(placement.Config{ScheduleTimeout: 60 * time.Second, Snapshots: roam})
	other := f.placement(placement.Config{ScheduleTimeout: 5 * time.Second, Snapshots: roam}) // a second replica
	var exits exitLog
	exits.follow(p)
	exits.follow(other)
	const id = "sbx_roam_1"
	name := worker.SuspendSnapshot(id)
	ctx := bounded(t, 5*time.Minute)

	if _, err := p.CreateSandbox(ctx, spec(id)); err != nil {
		t.Fatal(err)
	}
	pod, err := f.podOf(id)
	if err != nil {
		t.Fatal(err)
	}
	from, to := a, b
	if pod.Spec.NodeName == b.name {
		from, to = b, a
	}

	st, err := p.SuspendSandbox(ctx, id)
	if err != nil || st.State != worker.VMSuspended || st.Spec.MemoryMiB != 256 {
		t.Fatalf("suspend: %+v, %v", st, err)
	}
	if _, err := f.podOf(id); !apierrors.IsNotFound(err) {
		t.Fatalf("the suspended sandbox's pod: %v, want gone", err)
	}
	if has, _ := from.w.has(id); has {
		t.Fatalf("%s still holds the suspended sandbox", from.name)
	}
	for _, r := range []*placement.Placement{p, other} {
		f.eventually(10*time.Second, "suspended, with no worker, on both replicas", func() (bool, string) {
			st, err := r.Sandbox(ctx, id)
			if err != nil || st.State != worker.VMSuspended || st.Spec.VCPUs != 1 {
				return false, fmt.Sprintf("%+v %v", st, err)
			}
			all, err := r.Sandboxes(ctx)
			for _, s := range all {
				if s.ID == id {
					return s.State == worker.VMSuspended, fmt.Sprintf("listed %+v", s)
				}
			}
			return false, fmt.Sprintf("not listed in %+v (%v)", all, err)
		})
	}

	f.cordon(from.name, true)
	st, err = p.WakeSandbox(ctx, id)
	if err != nil || st.State != worker.VMRunning || !st.Restored {
		t.Fatalf("wake: %+v, %v", st, err)
	}
	pod, err = f.podOf(id)
	if err != nil || pod.Spec.NodeName != to.name {
		t.Fatalf("woken pod on %q (%v), want %s", pod.Spec.NodeName, err, to.name)
	}
	if has, n := to.w.has(id); !has || n != 1 {
		t.Fatalf("%s has it %v, created %d", to.name, has, n)
	}
	if _, _, err := roam.Meta(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("the served snapshot: %v, want deleted", err)
	}
	f.cordon(from.name, false)

	// No room anywhere: the wake ends resource_exhausted, still suspended.
	if _, err := p.SuspendSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	f.cordon(a.name, true)
	f.cordon(b.name, true)
	// The second replica wakes it (any replica may), with a short wait.
	if _, err := other.WakeSandbox(ctx, id); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("wake with every node cordoned: %v, want resource_exhausted", err)
	}
	for _, r := range []*placement.Placement{p, other} {
		f.eventually(10*time.Second, "still suspended after a wake with no room", func() (bool, string) {
			st, err := r.Sandbox(ctx, id)
			return err == nil && st.State == worker.VMSuspended, fmt.Sprintf("%+v %v", st, err)
		})
	}
	if _, _, err := roam.Meta(ctx, name); err != nil {
		t.Fatalf("the snapshot after a wake with no room: %v", err)
	}
	f.cordon(a.name, false)
	f.cordon(b.name, false)

	if err := p.DeleteSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := roam.Meta(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("snapshot of the deleted sandbox: %v", err)
	}
	if _, err := p.Sandbox(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleted suspended sandbox: %v", err)
	}
	time.Sleep(2 * testResync) // an Exit would be on its way by now
	if got := exits.of(id); len(got) != 0 {
		t.Fatalf("suspends and wakes reported exits: %+v", got)
	}
}
