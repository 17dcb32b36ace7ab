package firecracker

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
)

// bootCalls are the requests a cold boot of rig.spec makes, in order,
// with their bodies: a NIC on tap, the disk read-write.
func bootCalls(tap string) [][3]string {
	c := [][3]string{
		{"PUT", "/logger", `{"log_path":"/run/firecracker.log","level":"Warning","show_level":true,"show_log_origin":false}`},
		{"PUT", "/machine-config", `{"vcpu_count":2,"mem_size_mib":128,"smt":false,"track_dirty_pages":false}`},
		{"PUT", "/boot-source", `{"kernel_image_path":"/vmlinux","initrd_path":"/initrd","boot_args":"console=ttyS0 reboot=k panic=-1 pci=off quiet"}`},
		{"PUT", "/drives/disk0", `{"drive_id":"disk0","is_root_device":false,"is_read_only":false,"path_on_host":"/disk0","cache_type":"Writeback","io_engine":"Sync"}`},
	}
	if tap != "" {
		c = append(c, [3]string{"PUT", "/network-interfaces/net0", `{"iface_id":"net0","host_dev_name":"` + tap + `","guest_mac":"02:53:50:00:00:02"}`})
	}
	return append(c,
		[3]string{"PUT", "/vsock", `{"guest_cid":3,"uds_path":"/run/v.sock"}`},
		[3]string{"PUT", "/entropy", `{}`},
		[3]string{"PUT", "/actions", `{"action_type":"InstanceStart"}`},
	)
}

// wantCalls checks got against want (method, path, JSON body) in order.
func wantCalls(t *testing.T, got []call, want [][3]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("calls:\n got %s\nwant %d calls %v", names(got), len(want), want)
	}
	for i, w := range want {
		g := got[i]
		if g.Method != w[0] || g.Path != w[1] || !jsonEq(t, g.Body, w[2]) {
			t.Errorf("call %d = %s %s %s, want %s %s %s", i, g.Method, g.Path, g.Body, w[0], w[1], w[2])
		}
	}
}

// readGreeting dials the agent link and reads the stand-in agent's line.
func readGreeting(t *testing.T, vm vmm.VM) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := vm.DialAgent(ctx)
	if err != nil {
		t.Fatalf("DialAgent: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != standinGreet {
		t.Fatalf("agent link said %q, %v; want %q", line, err, standinGreet)
	}
}

func TestBootFollowsSpec(t *testing.T) {
	r := newRig(t, standinConfig{})
	spec := r.spec("vm-boot")
	spec.Network = testTap(t, "tap0", "02:53:50:00:00:02")
	ro := filepath.Join(r.dir, "base.img")
	if err := os.WriteFile(ro, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	spec.Disks = append(spec.Disks, vmm.Disk{Path: ro, ReadOnly: true})
	ctx := ctxT(t)
	vm, err := r.d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopOnCleanup(t, vm)
	want := bootCalls("tap0")
	want = append(want[:4:4], append([][3]string{{"PUT", "/drives/disk1",
		`{"drive_id":"disk1","is_root_device":false,"is_read_only":true,"path_on_host":"/disk1","cache_type":"Writeback","io_engine":"Sync"}`}}, want[4:]...)...)
	calls := r.calls()
	wantCalls(t, calls, want)
	// The jail paths name the caller's files, writable only where they must be.
	for _, c := range calls {
		for p, host := range c.Resolved {
			wantHost := map[string]string{
				"/vmlinux": spec.Kernel, "/initrd": spec.Initrd,
				"/disk0": spec.Disks[0].Path + " (rw)", "/disk1": ro,
				"/run/v.sock":          filepath.Join(spec.StateDir, "run", "v.sock") + " (rw)",
				"/run/firecracker.log": filepath.Join(spec.StateDir, "run", "firecracker.log") + " (rw)",
			}[p]
			if host != wantHost {
				t.Errorf("%s: jail path %s is %s, want %s", c, p, host, wantHost)
			}
		}
	}
	readGreeting(t, vm)
	readGreeting(t, vm) // a second dial replaces the first
	if tail := strings.Join(vm.ConsoleTail(10), "\n"); !strings.Contains(tail, "Linux version") {
		t.Errorf("console tail = %q", tail)
	}
	st, err := vm.(*VM).Status(ctx)
	if err != nil || st != "running" {
		t.Errorf("Status = %q, %v", st, err)
	}
	if err := vm.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, vm.PID())
	assertEmpty(t, spec.StateDir)
	if vm.Err() != nil {
		t.Errorf("Err after Stop = %v", vm.Err())
	}
	if len(vm.ConsoleTail(10)) == 0 {
		t.Error("console tail empty after Stop")
	}
}

func TestPauseSnapshotRestoreFollowSpec(t *testing.T) {
	r := newRig(t, standinConfig{})
	ctx := ctxT(t)
	spec := r.spec("vm-snap")
	spec.Network = testTap(t, "tap0", "02:53:50:00:00:02")
	vm, err := r.d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopOnCleanup(t, vm)
	p := vm.(vmm.Pauser)
	snap := filepath.Join(r.dir, "snap")
	// Not paused: refused before Firecracker is asked.
	if err := vm.(vmm.Snapshotter).Snapshot(ctx, snap); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Snapshot of a running VM = %v, want failed_precondition", err)
	}
	if err := p.Pause(ctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if st, _ := vm.(*VM).Status(ctx); st != "paused" {
		t.Errorf("Status after Pause = %q", st)
	}
	if err := vm.(vmm.Snapshotter).Snapshot(ctx, snap); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if err := p.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	want := append(bootCalls("tap0"),
		[3]string{"PATCH", "/vm", `{"state":"Paused"}`},
		[3]string{"PUT", "/snapshot/create", `{"snapshot_path":"/run/vmstate.new","mem_file_path":"/run/memory.new","snapshot_type":"Full"}`},
		[3]string{"PATCH", "/vm", `{"state":"Resumed"}`},
	)
	wantCalls(t, r.calls(), want)
	// The state is in the snapshot dir, the memory where the worker
	// reflinks it from; the run dir keeps neither.
	if _, err := os.Stat(filepath.Join(snap, StateFile)); err != nil {
		t.Errorf("state file: %v", err)
	}
	if st, err := os.Stat(spec.MemoryFile); err != nil || st.Size() != 128<<20 {
		t.Errorf("memory file: %v", err)
	}
	for _, f := range []string{fileNewMemory, fileNewState} {
		if _, err := os.Stat(filepath.Join(spec.StateDir, dirRun, f)); err == nil {
			t.Errorf("%s left in the run dir", f)
		}
	}
	if err := vm.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// A clone: its own memory copy, state dir and tap.
	os.Truncate(r.log, 0)
	spec2 := r.spec("vm-clone")
	spec2.Network = testTap(t, "tap1", "02:53:50:00:00:02")
	copyTestFile(t, spec.MemoryFile, spec2.MemoryFile)
	vm2, err := r.d.Restore(ctx, spec2, snap)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	stopOnCleanup(t, vm2)
	calls := r.calls()
	wantCalls(t, calls, [][3]string{
		bootCalls("")[0],
		{"PUT", "/snapshot/load", `{"snapshot_path":"/run/vmstate","mem_backend":{"backend_type":"File","backend_path":"/memory"},
			"track_dirty_pages":false,"resume_vm":false,
			"network_overrides":[{"iface_id":"net0","host_dev_name":"tap1"}],"vsock_override":{"uds_path":"/run/v.sock"}}`},
	})
	if len(calls) == 2 {
		// The memory file is the clone's own, and the jail binds it read-only.
		if got := calls[1].Resolved["/memory"]; got != spec2.MemoryFile {
			t.Errorf("/memory is %q, want %s read-only", got, spec2.MemoryFile)
		}
	}
	if st, _ := vm2.(*VM).Status(ctx); st != "paused" {
		t.Errorf("restored VM is %q, want paused", st)
	}
	if err := vm2.(vmm.Pauser).Resume(ctx); err != nil {
		t.Fatal(err)
	}
	readGreeting(t, vm2)
	if _, err := os.Stat(filepath.Join(spec2.StateDir, dirRun, fileLoadState)); err == nil {
		t.Error("copy of the state file left in the run dir")
	}
	if err := vm2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, spec2.StateDir)
}

// TestPoolRestore is the pool's path: a VMM started empty, then the
// snapshot loaded, then moved under another sandbox's dir.
func TestPoolRestore(t *testing.T) {
	r := newRig(t, standinConfig{})
	ctx := ctxT(t)
	spec := r.spec("vm-src")
	vm, err := r.d.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, vm)
	_ = vm.(vmm.Pauser).Pause(ctx)
	snap := filepath.Join(r.dir, "snap")
	if err := vm.(vmm.Snapshotter).Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	_ = vm.Stop(ctx)

	pool := r.spec("pool-1")
	copyTestFile(t, spec.MemoryFile, pool.MemoryFile)
	pv, err := r.d.StartIncoming(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, pv)
	if err := pv.(*VM).Incoming(ctx, snap); err != nil {
		t.Fatalf("Incoming: %v", err)
	}
	moved := filepath.Join(r.dir, "sandbox-vm")
	if err := os.Rename(pool.StateDir, moved); err != nil {
		t.Fatal(err)
	}
	taken := pool
	taken.ID, taken.StateDir = "sandbox", moved
	if err := pv.(*VM).Relocate(taken); err != nil {
		t.Fatal(err)
	}
	if err := pv.(*VM).Detach(); err != nil {
		t.Fatal(err)
	}
	adopted, err := r.d.Recover(ctx, moved)
	if err != nil {
		t.Fatalf("Recover after Relocate: %v", err)
	}
	if adopted.ID() != "sandbox" || adopted.PID() != pv.PID() {
		t.Errorf("adopted %s/%d, want sandbox/%d", adopted.ID(), adopted.PID(), pv.PID())
	}
	if err := adopted.(vmm.Pauser).Resume(ctx); err != nil {
		t.Fatal(err)
	}
	readGreeting(t, adopted)
	if err := adopted.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, moved)
	r.calls() // no violations
}

func TestRecover(t *testing.T) {
	r := newRig(t, standinConfig{})
	ctx := ctxT(t)
	if _, err := r.d.Recover(ctx, t.TempDir()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Recover of an empty dir = %v, want not_found", err)
	}
	spec := r.spec("vm-adopt")
	vm, err := r.d.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, vm)
	if err := vm.(vmm.Detacher).Detach(); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.DialAgent(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("DialAgent after Detach = %v", err)
	}
	d2 := *r.d // a restarted worker's driver
	vm2, err := d2.Recover(ctx, spec.StateDir)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if vm2.PID() != vm.PID() || vm2.ID() != spec.ID {
		t.Errorf("recovered %d/%s", vm2.PID(), vm2.ID())
	}
	readGreeting(t, vm2)
	if err := vm2.(vmm.Pauser).Pause(ctx); err != nil {
		t.Error(err)
	}
	if err := vm2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, vm.PID())
	assertEmpty(t, spec.StateDir)

	// A VMM that died while nobody watched: not found, leftovers cleaned.
	spec = r.spec("vm-dead")
	vm, err = r.d.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	_ = vm.(vmm.Detacher).Detach()
	_ = syscall.Kill(vm.PID(), syscall.SIGKILL)
	select {
	case <-vm.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("killed vmm did not exit")
	}
	if vm.Err() == nil {
		t.Error("Err is nil after the VMM was killed")
	}
	if _, err := d2.Recover(ctx, spec.StateDir); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Recover of a dead VMM = %v, want not_found", err)
	}
	assertEmpty(t, spec.StateDir)
	r.calls()
}

// TestAPIErrors: each call Firecracker refuses fails the operation with
// the fault, classed, and a failed start leaves nothing behind.
func TestAPIErrors(t *testing.T) {
	for _, step := range []string{"PUT /logger", "PUT /machine-config", "PUT /boot-source", "PUT /drives/disk0",
		"PUT /network-interfaces/net0", "PUT /vsock", "PUT /entropy", "PUT /actions"} {
		t.Run(strings.NewReplacer("/", "_", " ", "").Replace(step), func(t *testing.T) {
			r := newRig(t, standinConfig{Fail: step})
			spec := r.spec("vm-fail")
			spec.Network = testTap(t, "tap0", "02:53:50:00:00:02")
			_, err := r.d.Start(ctxT(t), spec)
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "injected failure of "+step) {
				t.Fatalf("Start = %v, want failed_precondition with the fault", err)
			}
			calls := r.calls()
			if last := calls[len(calls)-1]; last.String() != step || last.Status != 400 {
				t.Errorf("last call %s %d, want %s 400", last, last.Status, step)
			}
			assertEmpty(t, spec.StateDir)
		})
	}
	t.Run("BadKernel", func(t *testing.T) {
		r := newRig(t, standinConfig{})
		spec := r.spec("vm-badkernel")
		if err := os.WriteFile(spec.Kernel, []byte("MZ a bzImage, not an ELF vmlinux"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := r.d.Start(ctxT(t), spec)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "ELF") {
			t.Fatalf("Start = %v", err)
		}
		assertEmpty(t, spec.StateDir)
	})
	for _, step := range []string{"PATCH /vm", "PUT /snapshot/create"} {
		t.Run(strings.NewReplacer("/", "_", " ", "").Replace(step), func(t *testing.T) {
			r := newRig(t, standinConfig{Fail: step})
			ctx := ctxT(t)
			spec := r.spec("vm-fail")
			vm, err := r.d.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			stopOnCleanup(t, vm)
			err = vm.(vmm.Pauser).Pause(ctx)
			if step == "PUT /snapshot/create" {
				if err != nil {
					t.Fatal(err)
				}
				err = vm.(vmm.Snapshotter).Snapshot(ctx, filepath.Join(r.dir, "snap"))
				if _, serr := os.Stat(spec.MemoryFile); serr == nil {
					t.Error("a failed snapshot replaced the memory file")
				}
			}
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "injected failure") {
				t.Fatalf("%s = %v", step, err)
			}
			r.calls()
		})
	}
	t.Run("SnapshotLoad", func(t *testing.T) {
		r := newRig(t, standinConfig{Fail: "PUT /snapshot/load"})
		snap := t.TempDir()
		if err := os.WriteFile(filepath.Join(snap, StateFile), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		spec := r.spec("vm-load")
		if err := os.WriteFile(spec.MemoryFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := r.d.Restore(ctxT(t), spec, snap)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "injected failure") {
			t.Fatalf("Restore = %v", err)
		}
		assertEmpty(t, spec.StateDir)
		r.calls()
	})
	t.Run("InternalError", func(t *testing.T) {
		r := newRig(t, standinConfig{Fail: "PUT /actions", FailStatus: 500})
		spec := r.spec("vm-500")
		_, err := r.d.Start(ctxT(t), spec)
		if !errors.Is(err, errdefs.ErrInternal) || !strings.Contains(err.Error(), "500 stand-in: injected failure") {
			t.Fatalf("Start = %v, want internal with the fault", err)
		}
		assertEmpty(t, spec.StateDir)
		r.calls()
	})
	t.Run("Hang", func(t *testing.T) {
		r := newRig(t, standinConfig{Hang: "PUT /boot-source"})
		spec := r.spec("vm-hang")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := r.d.Start(ctx, spec)
		if !errors.Is(err, errdefs.ErrDeadlineExceeded) {
			t.Fatalf("Start against a hung API = %v, want deadline_exceeded", err)
		}
		assertEmpty(t, spec.StateDir)
	})
}

func copyTestFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
