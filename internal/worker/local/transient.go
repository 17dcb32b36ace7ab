package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// transientFile, in a sandbox's directory, records what the worker itself has
// done to the sandbox's VM in the middle of a suspend or a checkpoint: paused
// its vCPUs (and, in a suspend by a worker before suspends stopped freezing,
// frozen its filesystems: Frozen, which such a worker's record may still
// hold when a new worker adopts the sandbox). It is written before the first such step
// and removed once the step is undone or the suspend is sealed, so a worker
// that crashed in between knows at adoption what to undo, and the sandbox
// comes back as its user left it (running, or paused by them).
const transientFile = "transient.json"

type transient struct {
	Op        string `json:"op"`         // "suspend" or "checkpoint"
	Frozen    bool   `json:"frozen"`     // the agent may have frozen the guest filesystems (older workers' suspends)
	WasPaused bool   `json:"was_paused"` // the user had paused the sandbox before
}

func (sb *sandbox) markTransient(t transient) error {
	if err := snapfile.WriteJSON(sb.path(transientFile), t); err != nil {
		return snapfile.DiskError("record "+t.Op+" in progress", err)
	}
	return nil
}

func (sb *sandbox) clearTransient() { _ = os.Remove(sb.path(transientFile)) }

// readTransient returns the recorded step in progress, if any.
func (sb *sandbox) readTransient() (transient, bool) {
	var t transient
	if err := snapfile.ReadJSON(sb.path(transientFile), &t); err != nil {
		return t, false
	}
	return t, true
}

// adoptionTimeout bounds the recovery of one sandbox at start-up, so that one
// guest that cannot answer never keeps the server from serving.
const adoptionTimeout = 30 * time.Second

// vmRunState asks an adopted VM for its run state: worker.VMRunning,
// worker.VMPaused (paused by anyone, or stopped after a snapshot was
// written), or an error for a VM that cannot be resumed as it is (its
// restore never finished, it broke). A snapshot still being written is
// awaited.
func vmRunState(ctx context.Context, vm vmm.VM) (worker.VMState, error) {
	s, ok := vm.(vmm.StatusReporter)
	if !ok {
		return worker.VMRunning, nil
	}
	for {
		st, err := s.RunState(ctx)
		if err != nil {
			return "", err
		}
		switch st {
		case vmm.RunRunning:
			return worker.VMRunning, nil
		case vmm.RunPaused:
			return worker.VMPaused, nil
		case vmm.RunSaving:
			// A snapshot the crashed worker started is still being written.
			select {
			case <-ctx.Done():
				return "", fmt.Errorf("snapshot still being written: %w", ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		default:
			return "", fmt.Errorf("vm is %s", st)
		}
	}
}

// undoTransient puts an adopted sandbox's VM back as its user left it, after a
// suspend or checkpoint a crash interrupted: resumed so the agent can thaw the
// filesystems, thawed, and paused again if the user had paused it.
func (w *Worker) undoTransient(ctx context.Context, sb *sandbox, t transient) error {
	p, ok := sb.vm.(vmm.Pauser)
	if !ok {
		return errors.New("this worker's VMM cannot pause or resume")
	}
	if sb.paused && (t.Frozen || !t.WasPaused) {
		if err := p.Resume(ctx); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		sb.paused = false
		// The first link to a guest resumed after a snapshot it did not
		// see end can stall in its handshake: redial until the agent
		// answers, so the sandbox is only called running once it does.
		if _, err := sb.agent.WaitReady(ctx); err != nil {
			return fmt.Errorf("agent after resume: %w", err)
		}
	}
	if t.Frozen {
		if err := sb.agent.Thaw(ctx); err != nil {
			return fmt.Errorf("thaw guest filesystems: %w", err)
		}
	}
	if t.WasPaused && !sb.paused {
		if err := p.Pause(ctx); err != nil {
			return fmt.Errorf("pause: %w", err)
		}
		sb.paused = true
	}
	sb.clearTransient()
	return nil
}
