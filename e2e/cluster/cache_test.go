package cluster

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/worker"
)

// A worker whose object cache (--cache-bytes) holds about two and a half
// of the snapshots it is asked for: a branch of a checkpoint taken
// elsewhere, then wakes of three suspended sandboxes, then the branch
// again, all landing on it (the other nodes cordoned). After each, the
// test reads the cache dir: it never holds more than the bound, the entry
// the wake or branch just used is there (its own fill never evicts it),
// the oldest entries were evicted to make room, and the checkpoint's
// entry, evicted meanwhile, is fetched again for the second branch.
func TestCacheBoundOnLiveWorker(t *testing.T) {
	r := replica(t, 0)
	objs := objectStore(t)
	target := len(cl.Info.Workers) - 1
	node := cl.Info.Workers[target].Name

	// Everything is made on the other workers first.
	schedulable(t, node, false)
	src := r.create(map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256})
	r.exec(src.ID, "echo checkpointed > /root/who")
	var ck apiv1.CheckpointAndOperation
	if code := r.do("POST", "/v1/sandboxes/"+src.ID+"/checkpoints", map[string]any{"name": "cache"}, &ck); code != http.StatusAccepted {
		t.Fatalf("checkpoint: HTTP %d", code)
	}
	if op := r.waitOperation(ck.Operation.ID, 5*time.Minute); op.State != "succeeded" {
		t.Fatalf("checkpoint: %s %s", op.State, errorOf(op))
	}
	t.Cleanup(func() { r.do("DELETE", "/v1/checkpoints/"+ck.Checkpoint.ID, nil, nil) })
	r.deleteSandbox(src.ID)
	var suspended []apiv1.Sandbox
	for i := range 3 {
		sb := r.create(map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256})
		r.exec(sb.ID, "echo "+strconv.Itoa(i)+" > /root/who")
		suspended = append(suspended, sb)
	}
	for _, sb := range suspended {
		lifecycle(t, r, sb.ID, "suspend")
	}

	// The bound: two and a half of the largest entry, as the cache sizes
	// an entry (its data plus 16 KiB a file and one more).
	var largest int64
	for _, name := range []string{worker.CheckpointSnapshot(ck.Checkpoint.ID), worker.SuspendSnapshot(suspended[0].ID),
		worker.SuspendSnapshot(suspended[1].ID), worker.SuspendSnapshot(suspended[2].ID)} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		m, err := objs.StatSnapshot(ctx, name)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		largest = max(largest, m.DataBytes()+int64(len(m.Files)+1)*16<<10)
	}
	bound := largest*5/2 + 1
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cl.RestartWorkerWith(ctx, target, "--cache-bytes", strconv.FormatInt(bound, 10)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := cl.RestartWorkerWith(ctx, target); err != nil {
			t.Errorf("restart %s with its own flags: %v", node, err)
		}
	})
	schedulable(t, node, true)
	for i, w := range cl.Info.Workers {
		if i != target {
			schedulable(t, w.Name, false)
		}
	}
	t.Logf("cache bound %d bytes (largest entry %d)", bound, largest)

	dir := cl.WorkerCacheDir(target)
	seen := map[string]bool{}
	// used runs step, which lands on the target, and returns the cache
	// entry it made; it checks the bound and that the entry is there.
	used := func(what string, step func() apiv1.Sandbox) string {
		t.Helper()
		before := cacheEntries(t, dir)
		sb := step()
		if sb.Worker != node {
			t.Fatalf("%s landed on %s, want %s (the others are cordoned)", what, sb.Worker, node)
		}
		after := cacheEntries(t, dir)
		var total int64
		var made []string
		for e, n := range after {
			total += n
			if _, ok := before[e]; !ok {
				made = append(made, e)
			}
		}
		if total > bound {
			t.Errorf("after %s the cache holds %d bytes, over its bound of %d", what, total, bound)
		}
		if len(made) != 1 {
			t.Fatalf("%s made %d cache entries (%v), want the one it used; before %v, after %v", what, len(made), made, before, after)
		}
		t.Logf("after %s: %d entries, %d of %d bytes", what, len(after), total, bound)
		seen[made[0]] = true
		return made[0]
	}
	branch := func() apiv1.Sandbox {
		b := r.create(map[string]any{"from_checkpoint": ck.Checkpoint.ID})
		if out := r.exec(b.ID, "cat /root/who"); out != "checkpointed\n" {
			t.Fatalf("branch reads %q", out)
		}
		r.deleteSandbox(b.ID)
		return b
	}
	ckEntry := used("the first branch", branch)
	for i, sb := range suspended {
		used("wake "+strconv.Itoa(i), func() apiv1.Sandbox {
			lifecycle(t, r, sb.ID, "wake")
			if out := r.exec(sb.ID, "cat /root/who"); out != strconv.Itoa(i)+"\n" {
				t.Fatalf("woken %s reads %q", sb.ID, out)
			}
			got := r.sandbox(sb.ID)
			lifecycle(t, r, sb.ID, "suspend")
			return got
		})
	}
	left := cacheEntries(t, dir)
	if _, ok := left[ckEntry]; ok {
		t.Fatalf("after 4 fills of a cache that holds 2.5, the first (the checkpoint's) is still there: %v", left)
	}
	if len(left) >= len(seen) {
		t.Errorf("%d entries left of the %d made: nothing was evicted", len(left), len(seen))
	}
	if again := used("the second branch", branch); again != ckEntry {
		t.Errorf("the second branch filled %s, the first %s: want the checkpoint's entry fetched again", again, ckEntry)
	}
}

// cacheEntries lists the entries of a worker's object cache with the disk
// bytes each takes (what the cache counts against its bound); a
// temporary (a fill in progress, an eviction being removed) counts too.
func cacheEntries(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("cache dir: %v", err)
	}
	out := map[string]int64{}
	for _, de := range des {
		if !de.IsDir() {
			continue
		}
		var n int64
		err := filepath.WalkDir(filepath.Join(dir, de.Name()), func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Sys().(*syscall.Stat_t).Blocks * 512
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		name := de.Name()
		if strings.HasPrefix(name, ".tmp-") {
			name = "temporary " + name
		}
		out[name] = n
	}
	return out
}

// schedulable cordons (false) or uncordons a node, and puts it back as
// schedulable when the test ends.
func schedulable(t *testing.T, node string, on bool) {
	t.Helper()
	set := func(unschedulable bool) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, unschedulable)
		_, err := cl.Kube().CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		return err
	}
	if err := set(!on); err != nil {
		t.Fatalf("node %s schedulable=%t: %v", node, on, err)
	}
	if !on {
		t.Cleanup(func() {
			if err := set(false); err != nil {
				t.Errorf("uncordon %s: %v", node, err)
			}
		})
	}
}

// objectStore opens the cluster's object store as the workers do.
func objectStore(t *testing.T) *objstore.Store {
	t.Helper()
	loc, err := objstore.ParseURL(cl.Info.S3)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := objstore.LoadCredentials(cl.Info.S3CredentialsFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := objstore.Open(ctx, loc, creds, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}
