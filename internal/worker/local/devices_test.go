package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local"
)

// TestDeviceSetAcrossUpgrade: a sandbox whose VM was booted by a worker
// without the free-page-reporting balloon keeps its device set across a
// worker restart into one with it: adopted running, suspended (the
// manifest names the old set), and woken — also from a manifest written
// before the set was recorded — with its files and processes, on a VMM
// without the balloon. A new sandbox gets the balloon; a snapshot naming a
// set newer than the worker knows is failed_precondition and stays
// suspended.
func TestDeviceSetAcrossUpgrade(t *testing.T) {
	e := newEnv(t)
	e.cfg.PoolSize = -1
	e.cfg.DisableSnapshots = true // cold boots: the set under test is the boot's
	ctx := context.Background()

	restore := local.BootOriginalDevices()
	defer restore()
	old := e.open()
	crashed := false
	defer func() {
		if !crashed {
			cleanupAll(t, old)
		}
	}()
	const id = "sbx_oldset"
	st := must(old.CreateSandbox(ctx, spec(id)))(t)
	if hasBalloon(t, st.VMMPID) {
		t.Fatal("a VM booted with the original set has the balloon")
	}
	c := agent(t, old, id)
	data := writeRandom(t, c, "/root/data", 1<<20)
	startCounter(t, c)
	before := count(t, c)
	old.Crash() // the upgrade: the VM runs on
	crashed = true
	restore()

	w := e.open()
	defer cleanupAll(t, w)
	must(w.SuspendSandbox(ctx, id))(t)
	m := readManifest(t, w.SuspendManifest(id))
	if m["device_set"] != float64(1) {
		t.Fatalf("suspend of an adopted original-set VM: manifest device_set %v, want 1", m["device_set"])
	}
	delete(m, "device_set") // as a worker before the record wrote it
	writeManifest(t, w.SuspendManifest(id), m)
	st = must(w.WakeSandbox(ctx, id))(t)
	if hasBalloon(t, st.VMMPID) {
		t.Fatal("a VM restored from an original-set snapshot has the balloon")
	}
	c = agent(t, w, id)
	checkFile(t, c, "/root/data", data)
	if after := waitCount(t, c, before); after < before {
		t.Fatalf("counter went back: %d then %d", before, after)
	}

	// Once more through a wake slot, which must be of the same set.
	must(w.SuspendSandbox(ctx, id))(t)
	if m := readManifest(t, w.SuspendManifest(id)); m["device_set"] != float64(1) {
		t.Fatalf("second suspend: manifest device_set %v, want 1", m["device_set"])
	}
	st = must(w.WakeSandbox(ctx, id))(t)
	if hasBalloon(t, st.VMMPID) {
		t.Fatal("the second wake's VM has the balloon")
	}
	checkFile(t, agent(t, w, id), "/root/data", data)

	const fresh = "sbx_newset"
	st = must(w.CreateSandbox(ctx, spec(fresh)))(t)
	if !hasBalloon(t, st.VMMPID) {
		t.Fatal("a new sandbox's VM has no balloon")
	}
	must(w.SuspendSandbox(ctx, fresh))(t)
	m = readManifest(t, w.SuspendManifest(fresh))
	if m["device_set"] != float64(2) {
		t.Fatalf("suspend of a new VM: manifest device_set %v, want 2", m["device_set"])
	}
	m["device_set"] = float64(99)
	writeManifest(t, w.SuspendManifest(fresh), m)
	if _, err := w.WakeSandbox(ctx, fresh); errdefs.ClassOf(err) != errdefs.ErrFailedPrecondition {
		t.Fatalf("wake of a snapshot from a newer worker: %v, want failed_precondition", err)
	}
	wantState(t, w, fresh, worker.VMSuspended)
	m["device_set"] = float64(2)
	writeManifest(t, w.SuspendManifest(fresh), m)
	st = must(w.WakeSandbox(ctx, fresh))(t)
	if !hasBalloon(t, st.VMMPID) {
		t.Fatal("the new sandbox woke without its balloon")
	}
}

func hasBalloon(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatalf("VMM %d: %v", pid, err)
	}
	return bytes.Contains(b, []byte("virtio-balloon"))
}

func readManifest(t *testing.T, path string) map[string]any {
	t.Helper()
	var m map[string]any
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		t.Fatalf("manifest %s: %v", path, err)
	}
	return m
}

func writeManifest(t *testing.T, path string, m map[string]any) {
	t.Helper()
	b, err := json.Marshal(m)
	if err == nil {
		err = os.WriteFile(path, b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
}
