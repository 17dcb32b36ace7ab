package firecracker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/vmmproc"
)

// VM is one Firecracker process, started by Start/Restore or adopted by
// Recover.
type VM struct {
	d    *Driver
	done chan struct{}

	stopMu sync.Mutex // serialises Stop, Detach and Relocate

	mu         sync.Mutex
	api        *client
	dir        string
	rec        record
	log        *slog.Logger
	exitErr    error
	isStopping bool
	stopped    bool
	detached   bool
	agent      net.Conn
	// frozen is the console's tail kept when Stop removes the log.
	frozen []string
}

var (
	_ vmm.VM          = (*VM)(nil)
	_ vmm.Pauser      = (*VM)(nil)
	_ vmm.Detacher    = (*VM)(nil)
	_ vmm.Snapshotter = (*VM)(nil)
)

// ID implements vmm.VM.
func (v *VM) ID() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.rec.Spec.ID
}

// PID implements vmm.VM.
func (v *VM) PID() int { return v.rec.PID }

// Spec is the BootSpec the VM was started with.
func (v *VM) Spec() vmm.BootSpec {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.rec.Spec
}

// Jail is the VM's jail as recorded.
func (v *VM) Jail() *jail.State { return v.rec.Jail }

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
	if v.isStopping {
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
		v.exitErr = fmt.Errorf("firecracker: vmm killed by its memory limit (%d MiB guest + %d MiB overhead): %v: %w",
			v.rec.Spec.MemoryMiB, vmmOverheadMiB, werr, errdefs.ErrResourceExhausted)
		return
	}
	v.exitErr = fmt.Errorf("firecracker: vmm exited unexpectedly: %v: %w", werr, errdefs.ErrUnavailable)
}

func (v *VM) beginStop() {
	v.mu.Lock()
	v.isStopping = true
	if v.agent != nil {
		v.agent.Close()
		v.agent = nil
	}
	v.mu.Unlock()
}

func (v *VM) markStopped() {
	v.mu.Lock()
	v.stopped = true
	v.mu.Unlock()
}

func (v *VM) client() *client {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.api
}

func (v *VM) stateDir() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.dir
}

// ConsoleTail implements vmm.VM: the guest's serial console is
// Firecracker's stdout, kept in the console log.
func (v *VM) ConsoleTail(n int) []string {
	v.mu.Lock()
	if v.stopped {
		f := v.frozen
		v.mu.Unlock()
		if len(f) > n {
			f = f[len(f)-n:]
		}
		return append([]string(nil), f...)
	}
	dir := v.dir
	v.mu.Unlock()
	return vmmproc.TailLines(filepath.Join(dir, fileConsole), 256<<10, n)
}

// freezeConsole keeps the console's last lines before its log goes.
func (v *VM) freezeConsole() {
	lines := vmmproc.TailLines(filepath.Join(v.stateDir(), fileConsole), 64<<10, 1000)
	v.mu.Lock()
	v.frozen = lines
	v.mu.Unlock()
}

// DialAgent implements vmm.VM: a hybrid vsock connection to the agent's
// port. Dialling again closes the previous connection first.
func (v *VM) DialAgent(ctx context.Context) (net.Conn, error) {
	v.mu.Lock()
	if v.isStopping || v.detached {
		v.mu.Unlock()
		return nil, fmt.Errorf("firecracker: vm %s is stopped: %w", v.rec.Spec.ID, errdefs.ErrFailedPrecondition)
	}
	if v.agent != nil {
		v.agent.Close()
		v.agent = nil
	}
	dir := v.dir
	v.mu.Unlock()
	select {
	case <-v.done:
		return nil, fmt.Errorf("firecracker: vm %s: vmm exited: %w", v.ID(), errdefs.ErrUnavailable)
	default:
	}
	c, err := dialVsock(ctx, filepath.Join(dir, dirRun, fileVsock), agentproto.VsockPort)
	if err != nil {
		return nil, fmt.Errorf("firecracker: dial agent of %s: %w", v.ID(), err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.isStopping || v.detached {
		c.Close()
		return nil, fmt.Errorf("firecracker: vm %s is stopped: %w", v.rec.Spec.ID, errdefs.ErrFailedPrecondition)
	}
	v.agent = c
	return c, nil
}

// Pause implements vmm.Pauser (PATCH /vm Paused).
func (v *VM) Pause(ctx context.Context) error {
	return v.client().patch(ctx, "/vm", vmState{State: statePaused})
}

// Resume implements vmm.Pauser (PATCH /vm Resumed).
func (v *VM) Resume(ctx context.Context) error {
	return v.client().patch(ctx, "/vm", vmState{State: stateResumed})
}

// RunState implements vmm.StatusReporter.
func (v *VM) RunState(ctx context.Context) (vmm.RunState, error) {
	st, err := v.Status(ctx)
	switch {
	case err != nil:
		return "", err
	case st == "running":
		return vmm.RunRunning, nil
	case st == "paused":
		return vmm.RunPaused, nil
	}
	return vmm.RunNotStarted, nil
}

// Status is the VM's run state in the worker's words ("running",
// "paused", "prelaunch" before the instance starts or a snapshot loads).
func (v *VM) Status(ctx context.Context) (string, error) {
	i, err := v.client().info(ctx)
	if err != nil {
		return "", err
	}
	switch i.State {
	case infoRunning:
		return "running", nil
	case infoPaused:
		return "paused", nil
	case infoNotStarted:
		return "prelaunch", nil
	}
	return "", fmt.Errorf("firecracker: unknown instance state %q: %w", i.State, errdefs.ErrInternal)
}

// Detach implements vmm.Detacher: the VMM keeps running; Recover adopts
// it. The API client holds no connection, so only the agent link closes.
func (v *VM) Detach() error {
	v.stopMu.Lock()
	defer v.stopMu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.isStopping || v.detached {
		return nil
	}
	v.detached = true
	if v.agent != nil {
		v.agent.Close()
		v.agent = nil
	}
	return nil
}

// Stop implements vmm.VM. Firecracker has no API call that ends the VMM
// (SendCtrlAltDel asks the guest, which may ignore it), and a kill loses
// nothing the guest wrote: Firecracker's disk writes go to the host file
// (Writeback: the host's page cache keeps them, and the guest's flushes
// reach the disk), so Stop SIGKILLs the jail and the group.
func (v *VM) Stop(ctx context.Context) error {
	v.stopMu.Lock()
	defer v.stopMu.Unlock()
	v.mu.Lock()
	if v.stopped {
		v.mu.Unlock()
		return nil
	}
	v.mu.Unlock()
	v.beginStop()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if j := v.rec.Jail; j != nil {
		j.Kill()
	}
	if err := vmmproc.KillGroup(ctx, v.rec.PID, v.done); err != nil {
		return err
	}
	if j := v.rec.Jail; j != nil {
		j.Release()
	}
	v.freezeConsole()
	removeOwned(v.stateDir())
	v.markStopped()
	v.log.Debug("vmm stopped")
	return nil
}
