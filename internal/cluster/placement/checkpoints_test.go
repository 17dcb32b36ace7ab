package placement_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/testenv/s3test"
	"github.com/space-sandbox/space/internal/worker"
)

// checkpointStore is a real SeaweedFS holding checkpoints as a worker
// uploads them (worker/local does so on every Checkpoint).
func checkpointStore(t *testing.T) objstore.Snapshots {
	t.Helper()
	srv := s3test.New(t, "space-placement")
	loc, err := objstore.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	st, err := objstore.Open(bounded(t, time.Minute), loc, objstore.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return objstore.Snapshots{Store: st}
}

// putCheckpoint stores a checkpoint the way a worker does: its files under
// worker.CheckpointSnapshot(id), its status as the meta.
func putCheckpoint(t *testing.T, s objstore.Snapshots, ck worker.CheckpointStatus) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "memory"), []byte("guest memory of "+ck.ID), 0o600); err != nil {
		t.Fatal(err)
	}
	meta, err := json.Marshal(ck)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(bounded(t, time.Minute), worker.CheckpointSnapshot(ck.ID), dir, []string{"memory"}, meta); err != nil {
		t.Fatal(err)
	}
}

// TestBranchPlacedByScheduler: with checkpoints in object storage, a
// branch is not pinned — its Pod is placed by the scheduler like any
// create, sized from the checkpoint's spec (three 2-vCPU branches do not
// fit one 4-vCPU node, so they land on both), although no worker lists
// the checkpoint; checkpoints are listed and deleted in the store; a
// branch of a checkpoint the store lacks is not_found and makes no Pod.
func TestBranchPlacedByScheduler(t *testing.T) {
	store := checkpointStore(t)
	f := newFleet(t, "branchstore")
	a := f.addNode("a", 4, 4096, 4)
	b := f.addNode("b", 4, 4096, 4)
	parent := spec("sbx_parent")
	parent.VCPUs, parent.MemoryMiB = 2, 512
	putCheckpoint(t, store, worker.CheckpointStatus{ID: "ckpt_stored", SandboxID: "sbx_parent", Spec: parent,
		CreatedAt: time.Now().UTC().Truncate(time.Second)})
	p := f.placement(placement.Config{ScheduleTimeout: 60 * time.Second, Snapshots: store})

	cks, err := p.Checkpoints(bounded(t, 30*time.Second))
	if err != nil || len(cks) != 1 || cks[0].ID != "ckpt_stored" || cks[0].SandboxID != "sbx_parent" || cks[0].Spec.VCPUs != 2 {
		t.Fatalf("Checkpoints = %+v, %v; want ckpt_stored of sbx_parent", cks, err)
	}
	nodes := map[string]bool{}
	for _, id := range []string{"sbx_branch_0", "sbx_branch_1", "sbx_branch_2"} {
		s := worker.SandboxSpec{ID: id, FromCheckpoint: "ckpt_stored", Hostname: id, SecretScope: "ten_test"}
		if _, err := p.CreateSandbox(bounded(t, 90*time.Second), s); err != nil {
			t.Fatalf("branch %s: %v", id, err)
		}
		pod, err := f.podOf(id)
		if err != nil {
			t.Fatal(err)
		}
		if pod.Spec.Affinity != nil || len(pod.Spec.NodeSelector) != 1 {
			t.Errorf("branch %s is pinned: affinity %+v, node selector %v", id, pod.Spec.Affinity, pod.Spec.NodeSelector)
		}
		if got := pod.Spec.Containers[0].Resources.Requests.Cpu().Value(); got != 2 {
			t.Errorf("branch %s requests %d cpus, want the checkpoint's 2", id, got)
		}
		nodes[pod.Spec.NodeName] = true
	}
	if !nodes[a.name] || !nodes[b.name] {
		t.Errorf("branches on nodes %v, want both %s and %s", nodes, a.name, b.name)
	}

	orphan := worker.SandboxSpec{ID: "sbx_branch_orphan", FromCheckpoint: "ckpt_nowhere"}
	if _, err := p.CreateSandbox(bounded(t, 30*time.Second), orphan); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("branch of a checkpoint the store lacks: %v, want not_found", err)
	}
	if _, err := f.podOf(orphan.ID); !apierrors.IsNotFound(err) {
		t.Errorf("pod of refused branch: %v", err)
	}

	if err := p.DeleteCheckpoint(bounded(t, 30*time.Second), "ckpt_stored"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Meta(context.Background(), worker.CheckpointSnapshot("ckpt_stored")); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("checkpoint in the store after DeleteCheckpoint: %v", err)
	}
	if cks, err := p.Checkpoints(bounded(t, 30*time.Second)); err != nil || len(cks) != 0 {
		t.Errorf("Checkpoints after delete = %+v, %v; want none", cks, err)
	}
}
