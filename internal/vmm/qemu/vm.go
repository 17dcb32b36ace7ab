package qemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/vmmproc"
)

// VM is one QEMU process, started by Start/Restore or adopted by Recover.
type VM struct {
	d       *Driver
	dir     string
	rec     record
	log     *slog.Logger
	adopted bool
	qmp     *qmpClient
	cons    *console
	done    chan struct{}

	stopMu sync.Mutex // serialises Stop and Detach

	mu       sync.Mutex
	exitErr  error
	stopping bool
	stopped  bool
	detached bool
	agent    net.Conn
}

var (
	_ vmm.VM          = (*VM)(nil)
	_ vmm.Pauser      = (*VM)(nil)
	_ vmm.Detacher    = (*VM)(nil)
	_ vmm.Snapshotter = (*VM)(nil)
)

// ID implements vmm.VM.
func (v *VM) ID() string { return v.rec.Spec.ID }

// PID implements vmm.VM.
func (v *VM) PID() int { return v.rec.PID }

// Spec is the BootSpec the VM was started with.
func (v *VM) Spec() vmm.BootSpec { return v.rec.Spec }

// Accel is the accelerator the VM runs with ("kvm" or "tcg").
func (v *VM) Accel() string { return v.rec.Accel }

// Done implements vmm.VM.
func (v *VM) Done() <-chan struct{} { return v.done }

// Err implements vmm.VM.
func (v *VM) Err() error {
	select {
	case <-v.done:
	default:
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.stopping {
		return nil
	}
	return v.exitErr
}

func (v *VM) setExit(werr error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if werr == nil {
		werr = errors.New("exited")
	}
	if j := v.rec.Jail; j != nil && j.OOMKilled() {
		v.exitErr = fmt.Errorf("qemu: vmm killed by its memory limit (%d MiB guest + %d MiB overhead): %v: %w",
			v.rec.Spec.MemoryMiB, vmmOverheadMiB, werr, errdefs.ErrResourceExhausted)
		return
	}
	v.exitErr = fmt.Errorf("qemu: vmm exited unexpectedly: %v: %w", werr, errdefs.ErrUnavailable)
}

// ConsoleTail implements vmm.VM.
func (v *VM) ConsoleTail(n int) []string { return v.cons.tail(n) }

// DialAgent implements vmm.VM. The agent chardev accepts one client at a
// time, so the previous connection is closed first.
func (v *VM) DialAgent(ctx context.Context) (net.Conn, error) {
	v.mu.Lock()
	if v.stopping || v.detached {
		v.mu.Unlock()
		return nil, fmt.Errorf("qemu: vm %s is stopped: %w", v.ID(), errdefs.ErrFailedPrecondition)
	}
	if v.agent != nil {
		v.agent.Close()
		v.agent = nil
	}
	v.mu.Unlock()
	select {
	case <-v.done:
		return nil, fmt.Errorf("qemu: vm %s: vmm exited: %w", v.ID(), errdefs.ErrUnavailable)
	default:
	}
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", filepath.Join(v.dir, fileAgent))
	if err != nil {
		return nil, fmt.Errorf("qemu: dial agent of %s: %w: %v", v.ID(), errdefs.ErrUnavailable, err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.stopping || v.detached {
		c.Close()
		return nil, fmt.Errorf("qemu: vm %s is stopped: %w", v.ID(), errdefs.ErrFailedPrecondition)
	}
	v.agent = c
	return c, nil
}

// Pause implements vmm.Pauser.
func (v *VM) Pause(ctx context.Context) error { return v.qmp.Execute(ctx, "stop", nil, nil) }

// Resume implements vmm.Pauser.
func (v *VM) Resume(ctx context.Context) error { return v.qmp.Execute(ctx, "cont", nil, nil) }

// RunState implements vmm.StatusReporter from QEMU's run state.
func (v *VM) RunState(ctx context.Context) (vmm.RunState, error) {
	st, err := v.Status(ctx)
	if err != nil {
		return "", err
	}
	switch st {
	case "running":
		return vmm.RunRunning, nil
	case "finish-migrate", "save-vm":
		return vmm.RunSaving, nil
	case "inmigrate", "prelaunch", "restore-vm":
		return vmm.RunNotStarted, nil
	case "shutdown", "internal-error", "io-error", "guest-panicked":
		return vmm.RunBroken, nil
	}
	return vmm.RunPaused, nil // paused, postmigrate, suspended, debug, watchdog
}

// Status is QEMU's run state ("running", "paused", "inmigrate", ...).
func (v *VM) Status(ctx context.Context) (string, error) {
	var st struct {
		Status string `json:"status"`
	}
	if err := v.qmp.Execute(ctx, "query-status", nil, &st); err != nil {
		return "", err
	}
	return st.Status, nil
}

// Detach implements vmm.Detacher: the VMM keeps running; Recover adopts it.
func (v *VM) Detach() error {
	v.stopMu.Lock()
	defer v.stopMu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.stopping || v.detached {
		return nil
	}
	v.detached = true
	if v.agent != nil {
		v.agent.Close()
		v.agent = nil
	}
	return v.qmp.Close()
}

// Stop implements vmm.VM: QMP quit, then SIGKILL to the process group after
// a short bound; then the driver's files in StateDir are removed.
func (v *VM) Stop(ctx context.Context) error {
	v.stopMu.Lock()
	defer v.stopMu.Unlock()
	v.mu.Lock()
	if v.stopped {
		v.mu.Unlock()
		return nil
	}
	v.stopping = true
	if v.agent != nil {
		v.agent.Close()
		v.agent = nil
	}
	v.mu.Unlock()

	// Teardown must finish even when the caller's context is already done.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	select {
	case <-v.done:
	default:
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		if err := v.qmp.Execute(qctx, "quit", nil, nil); err != nil {
			v.log.Debug("qmp quit", "err", err)
		}
		qcancel()
		t := time.NewTimer(3 * time.Second)
		select {
		case <-v.done:
		case <-t.C:
		}
		t.Stop()
	}
	// Always signal the group (and the cgroup): a VMM started before
	// jails may have left helpers (migration commands) behind.
	if j := v.rec.Jail; j != nil {
		j.Kill()
	}
	if err := vmmproc.KillGroup(ctx, v.rec.PID, v.done); err != nil {
		return err
	}
	if j := v.rec.Jail; j != nil {
		j.Release()
	}
	_ = v.qmp.Close()
	v.cons.freeze()
	removeOwned(v.dir)
	v.mu.Lock()
	v.stopped = true
	v.mu.Unlock()
	v.log.Debug("vmm stopped")
	return nil
}

func pidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }

func closeFD(fd int) { _ = unix.Close(fd) }
