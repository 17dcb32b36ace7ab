package local_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/worker"
)

// dirtyKiB is the guest's dirty page cache (Dirty in /proc/meminfo), in KiB.
func dirtyKiB(t *testing.T, c worker.Guest) int {
	t.Helper()
	if code := sh(t, c, `awk '/^Dirty:/ {print $2}' /proc/meminfo > /tmp/dirty`); code != 0 {
		t.Fatalf("read Dirty: exit %d", code)
	}
	b, err := readFile(t, c, "/tmp/dirty")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("Dirty %q: %v", b, err)
	}
	return n
}

// writeDirty writes 4 MiB of random data to path and its checksum beside
// it, syncing nothing: the data stays in the guest's dirty page cache.
func writeDirty(t *testing.T, c worker.Guest, path string) {
	t.Helper()
	if code := sh(t, c, "head -c 4194304 /dev/urandom > "+path+" && sha256sum "+path+" > "+path+".sum"); code != 0 {
		t.Fatalf("write %s: exit %d", path, code)
	}
	if kib := dirtyKiB(t, c); kib < 1024 {
		t.Fatalf("after writing 4 MiB unsynced the guest has %d KiB dirty: the test would not test dirty pages", kib)
	}
}

// checkDirty checks the files writeDirty wrote, as cached and then as read
// back from the disk (synced, caches dropped).
func checkDirty(t *testing.T, c worker.Guest, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if code := sh(t, c, "sha256sum -c "+p+".sum"); code != 0 {
			t.Fatalf("%s after wake: checksum exit %d", p, code)
		}
	}
	if code := sh(t, c, "sync && echo 3 > /proc/sys/vm/drop_caches"); code != 0 {
		t.Fatalf("sync and drop caches: exit %d", code)
	}
	for _, p := range paths {
		if code := sh(t, c, "sha256sum -c "+p+".sum"); code != 0 {
			t.Fatalf("%s read back from the disk after wake: checksum exit %d", p, code)
		}
	}
}

// wantUnfrozenManifest fails unless sandbox id's suspend manifest says its
// guest was not frozen (a worker that froze wrote no such field).
func wantUnfrozenManifest(t *testing.T, w interface{ SuspendManifest(string) string }, id string) {
	t.Helper()
	m := readManifest(t, w.SuspendManifest(id))
	if f, ok := m["frozen"]; !ok || f != false {
		t.Fatalf("suspend manifest frozen = %v (present %v), want false", f, ok)
	}
}

// TestSuspendDirtyPageCache: a suspend does not freeze the guest
// filesystems, and data the guest wrote just before it without syncing
// (dirty page cache) is there after the wake, cached and read back from
// the disk, through a second suspend/wake of the sandbox paused.
func TestSuspendDirtyPageCache(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	w := e.open()
	defer cleanupAll(t, w)
	const id = "sbx_dirty"
	must(w.CreateSandbox(ctx, spec(id)))(t)
	c := agent(t, w, id)

	writeDirty(t, c, "/root/one")
	must(w.SuspendSandbox(ctx, id))(t)
	wantUnfrozenManifest(t, w, id)
	must(w.WakeSandbox(ctx, id))(t)
	c = agent(t, w, id)
	checkDirty(t, c, "/root/one")

	// Again, suspended while paused (no resume: nothing to freeze).
	writeDirty(t, c, "/root/two")
	must(w.PauseSandbox(ctx, id))(t)
	must(w.SuspendSandbox(ctx, id))(t)
	wantUnfrozenManifest(t, w, id)
	wantState(t, w, id, worker.VMSuspended)
	must(w.WakeSandbox(ctx, id))(t)
	wantState(t, w, id, worker.VMRunning)
	checkDirty(t, agent(t, w, id), "/root/one", "/root/two")
}

// TestWakeThawsOldFrozenSnapshot: a suspend snapshot of a worker from
// before suspends stopped freezing (guest filesystems frozen, no "frozen"
// in the manifest) is thawed at the wake: the guest can write to / after.
func TestWakeThawsOldFrozenSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	w := e.open()
	defer cleanupAll(t, w)
	const id = "sbx_oldfrozen"
	must(w.CreateSandbox(ctx, spec(id)))(t)
	c := agent(t, w, id)
	data := writeRandom(t, c, "/root/data", 1<<20)
	// The older worker's suspend: the agent froze /, then the snapshot.
	fr, ok := c.(interface{ Freeze(context.Context) error })
	if !ok {
		t.Fatalf("the local guest %T cannot freeze", c)
	}
	fctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := fr.Freeze(fctx); err != nil {
		t.Fatal(err)
	}
	must(w.SuspendSandbox(ctx, id))(t)
	m := readManifest(t, w.SuspendManifest(id))
	delete(m, "frozen") // as an older worker wrote it
	writeManifest(t, w.SuspendManifest(id), m)
	must(w.WakeSandbox(ctx, id))(t)
	c = agent(t, w, id)
	checkFile(t, c, "/root/data", data)
	// sh gives up after 60 s: a write to a frozen / would block for good.
	if code := sh(t, c, "echo thawed > /root/after && sync && cat /root/after"); code != 0 {
		t.Fatalf("write to / after waking an old frozen snapshot: exit %d", code)
	}
}
