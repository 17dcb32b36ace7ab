// Package vmmtest is the conformance suite for vmm drivers: every driver's
// tests call Run with a Harness. It boots real VMs (no fakes) and checks what
// the vmm contract promises: agent link, stop leaves nothing behind, exit
// reporting, pause/resume, adoption after a worker restart, console tail,
// quick failure on a bad kernel, and snapshot/restore where offered.
//
// It owns nothing outside the temp dirs of the tests it runs.
package vmmtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
)

// Harness adapts one driver to the suite. New checks may add optional
// fields; a zero field means "the driver or guest cannot do that" and the
// checks that need it skip.
type Harness struct {
	// NewDriver returns a driver. It is called more than once per test
	// (adoption uses a second instance, as a restarted worker would).
	NewDriver func(t *testing.T) vmm.Driver
	// Guest returns the guest to boot (e.g. BusyboxGuest).
	Guest func(t *testing.T) Guest
	// Timeout bounds each wait for the guest (boot, agent link). Default 3m:
	// software emulation on a loaded 2-core host is slow.
	Timeout time.Duration
}

func (h Harness) timeout() time.Duration {
	if h.Timeout > 0 {
		return h.Timeout
	}
	return 3 * time.Minute
}

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	t.Run("BootAgentStop", func(t *testing.T) { testBootAgentStop(t, h) })
	t.Run("KilledFromOutside", func(t *testing.T) { testKilled(t, h) })
	t.Run("PauseResume", func(t *testing.T) { testPauseResume(t, h) })
	t.Run("RecoverRunning", func(t *testing.T) { testRecoverRunning(t, h) })
	t.Run("RecoverDead", func(t *testing.T) { testRecoverDead(t, h) })
	t.Run("BadKernel", func(t *testing.T) { testBadKernel(t, h) })
	t.Run("SnapshotRestore", func(t *testing.T) { testSnapshotRestore(t, h) })
	t.Run("Check", func(t *testing.T) { testCheck(t, h) })
	t.Run("RunState", func(t *testing.T) { testRunState(t, h) })
	t.Run("IncomingRelocate", func(t *testing.T) { testIncoming(t, h) })
}

// Spec returns a BootSpec for g with a fresh StateDir.
func Spec(t *testing.T, g Guest) vmm.BootSpec {
	return vmm.BootSpec{
		ID:        "vm-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())),
		StateDir:  t.TempDir(),
		Kernel:    g.Kernel,
		Initrd:    g.Initrd,
		Cmdline:   g.Cmdline,
		Disks:     g.Disks,
		VCPUs:     1,
		MemoryMiB: g.MemoryMiB,
	}
}

// Start starts spec on d and registers a Stop (and a leak check) in cleanup.
func Start(t *testing.T, h Harness, d vmm.Driver, spec vmm.BootSpec) vmm.VM {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout())
	defer cancel()
	vm, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	pid := vm.PID()
	t.Cleanup(func() {
		if err := vm.Stop(context.Background()); err != nil {
			t.Errorf("cleanup Stop: %v", err)
		}
		AssertGone(t, pid)
	})
	return vm
}

// ReadGreeting dials the agent link and reads one line starting with
// g.Greeting. It fails the test after the harness timeout.
func ReadGreeting(t *testing.T, h Harness, vm vmm.VM, g Guest) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout())
	defer cancel()
	conn, err := vm.DialAgent(ctx)
	if err != nil {
		t.Fatalf("DialAgent: %v", err)
	}
	line, err := readLine(ctx, conn, vm)
	if err != nil {
		t.Fatalf("read agent link: %v\nconsole:\n%s", err, strings.Join(vm.ConsoleTail(40), "\n"))
	}
	if !strings.HasPrefix(line, g.Greeting) {
		t.Fatalf("agent link said %q, want prefix %q", line, g.Greeting)
	}
	if g.DiskSectors > 0 && !strings.Contains(line, fmt.Sprintf("vda=%d", g.DiskSectors)) {
		t.Errorf("agent link said %q, want vda=%d (disk not attached?)", line, g.DiskSectors)
	}
	return line
}

func readLine(ctx context.Context, conn net.Conn, vm vmm.VM) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := bufio.NewReader(conn).ReadString('\n')
		ch <- res{strings.TrimSpace(s), err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-vm.Done():
		conn.Close()
		return "", fmt.Errorf("vmm exited: %v", vm.Err())
	case <-ctx.Done():
		conn.Close()
		return "", ctx.Err()
	}
}

// AssertGone fails unless pid and its process group are gone.
func AssertGone(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("vmm pid %d still exists (kill 0: %v)", pid, err)
	}
	if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("vmm process group %d still exists (kill 0: %v)", pid, err)
	}
}

// AssertEmptyDir fails if dir holds anything.
func AssertEmptyDir(t testing.TB, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Errorf("read state dir: %v", err)
		return
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) > 0 {
		t.Errorf("state dir not empty after stop: %v", names)
	}
}

func awaitDone(t *testing.T, h Harness, vm vmm.VM) {
	t.Helper()
	select {
	case <-vm.Done():
	case <-time.After(h.timeout()):
		t.Fatalf("vmm %d did not exit", vm.PID())
	}
}

func testBootAgentStop(t *testing.T, h Harness) {
	g := h.Guest(t)
	spec := Spec(t, g)
	vm := Start(t, h, h.NewDriver(t), spec)
	if vm.ID() != spec.ID || vm.PID() <= 0 {
		t.Errorf("ID, PID = %q, %d", vm.ID(), vm.PID())
	}
	ReadGreeting(t, h, vm, g)
	// Dialling again replaces the first connection and works the same.
	ReadGreeting(t, h, vm, g)
	if tail := strings.Join(vm.ConsoleTail(100000), "\n"); !strings.Contains(tail, "Linux version") {
		t.Errorf("console tail lacks the kernel's banner:\n%s", tail)
	}
	if got := vm.ConsoleTail(3); len(got) > 3 {
		t.Errorf("ConsoleTail(3) returned %d lines", len(got))
	}
	if err := vm.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-vm.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	if err := vm.Err(); err != nil {
		t.Errorf("Err after Stop = %v, want nil", err)
	}
	AssertGone(t, vm.PID())
	AssertEmptyDir(t, spec.StateDir)
	if err := vm.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if len(vm.ConsoleTail(10)) == 0 {
		t.Errorf("console tail empty after Stop")
	}
}

func testKilled(t *testing.T, h Harness) {
	g := h.Guest(t)
	spec := Spec(t, g)
	vm := Start(t, h, h.NewDriver(t), spec)
	if err := syscall.Kill(vm.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, h, vm)
	if vm.Err() == nil {
		t.Error("Err is nil after the VMM was killed from outside")
	}
	if err := vm.Stop(context.Background()); err != nil {
		t.Errorf("Stop after death: %v", err)
	}
	AssertEmptyDir(t, spec.StateDir)
}

func testPauseResume(t *testing.T, h Harness) {
	g := h.Guest(t)
	vm := Start(t, h, h.NewDriver(t), Spec(t, g))
	p, ok := vm.(vmm.Pauser)
	if !ok {
		t.Skip("driver has no Pauser")
	}
	ReadGreeting(t, h, vm, g)
	ctx := context.Background()
	if err := p.Pause(ctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := p.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	ReadGreeting(t, h, vm, g)
}

func testRecoverRunning(t *testing.T, h Harness) {
	g := h.Guest(t)
	spec := Spec(t, g)
	vm := Start(t, h, h.NewDriver(t), spec)
	det, ok := vm.(vmm.Detacher)
	if !ok {
		t.Skip("driver has no Detacher")
	}
	ReadGreeting(t, h, vm, g)
	if err := det.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout())
	defer cancel()
	vm2, err := h.NewDriver(t).Recover(ctx, spec.StateDir)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if vm2.PID() != vm.PID() || vm2.ID() != spec.ID {
		t.Errorf("recovered PID, ID = %d, %q; want %d, %q", vm2.PID(), vm2.ID(), vm.PID(), spec.ID)
	}
	ReadGreeting(t, h, vm2, g)
	if p, ok := vm2.(vmm.Pauser); ok {
		if err := p.Pause(ctx); err != nil {
			t.Errorf("Pause of adopted VM: %v", err)
		}
		if err := p.Resume(ctx); err != nil {
			t.Errorf("Resume of adopted VM: %v", err)
		}
	}
	if err := vm2.Stop(ctx); err != nil {
		t.Fatalf("Stop of adopted VM: %v", err)
	}
	awaitDone(t, h, vm)
	AssertGone(t, vm.PID())
	AssertEmptyDir(t, spec.StateDir)
}

func testRecoverDead(t *testing.T, h Harness) {
	ctx := context.Background()
	if _, err := h.NewDriver(t).Recover(ctx, t.TempDir()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Recover of an empty dir = %v, want not_found", err)
	}
	g := h.Guest(t)
	spec := Spec(t, g)
	vm := Start(t, h, h.NewDriver(t), spec)
	det, ok := vm.(vmm.Detacher)
	if !ok {
		t.Skip("driver has no Detacher")
	}
	if err := det.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if err := syscall.Kill(vm.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, h, vm)
	if _, err := h.NewDriver(t).Recover(ctx, spec.StateDir); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Recover of a dead VM = %v, want not_found", err)
	}
	AssertEmptyDir(t, spec.StateDir)
	AssertGone(t, vm.PID())
}

func testBadKernel(t *testing.T, h Harness) {
	g := h.Guest(t)
	spec := Spec(t, g)
	bad := filepath.Join(t.TempDir(), "vmlinuz-garbage")
	if err := os.WriteFile(bad, []byte(strings.Repeat("not a kernel\n", 4096)), 0o644); err != nil {
		t.Fatal(err)
	}
	spec.Kernel = bad
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout())
	defer cancel()
	vm, err := h.NewDriver(t).Start(ctx, spec)
	if err != nil {
		if ctx.Err() != nil {
			t.Fatalf("Start with a bad kernel ran into the deadline: %v", err)
		}
		AssertEmptyDir(t, spec.StateDir)
		return
	}
	// A driver may start the VMM and let the guest fail: it must then exit.
	t.Cleanup(func() { _ = vm.Stop(context.Background()) })
	awaitDone(t, h, vm)
	if err := vm.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
	AssertGone(t, vm.PID())
}
