package apitest

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// The fake's lifecycle keeps the agent serving in every state (a paused or
// suspended fake VM is a flag, not a stopped process); checkpoints are
// copies of the VM's root directory, so branches and restores see the files
// as they were, isolated from each other.

// checkpoint is one fake checkpoint: a copy of a VM's root.
type checkpoint struct {
	status worker.CheckpointStatus
	root   string
	// procs are the processes the sandbox's agent knew at the checkpoint;
	// a branch's agent gets stand-ins of them (see inheritProcesses).
	procs []agentproto.ProcessInfo
}

var _ worker.Lifecycle = (*Worker)(nil)

// SetCreateGate makes every CreateSandbox wait until gate is closed (nil:
// no waiting), like Gate, for a worker already in use.
func (w *Worker) SetCreateGate(gate chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Gate = gate
}

// SetLifecycleGate makes every lifecycle call wait until gate is closed
// (nil: no waiting).
func (w *Worker) SetLifecycleGate(gate chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.LifecycleGate = gate
}

// lifecycleStart waits for LifecycleGate (when set) and returns the VM.
func (w *Worker) lifecycleStart(ctx context.Context, id string) (*VM, error) {
	w.mu.Lock()
	gate := w.LifecycleGate
	w.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	vm, ok := w.vms[id]
	if !ok {
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %s is not on this worker", id)
	}
	return vm, nil
}

// move changes vm's state from one of from to to under w.mu, or fails with
// ErrConflict naming the state as the real worker does.
func (w *Worker) move(vm *VM, to worker.VMState, from ...worker.VMState) (worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Contains(from, vm.state()) {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrConflict, "sandbox %s is %s", vm.ID, vm.state()).
			WithDetails(map[string]any{"state": string(vm.state())})
	}
	vm.State = to
	return vm.status(), nil
}

func (vm *VM) state() worker.VMState {
	if vm.State == "" {
		return worker.VMRunning
	}
	return vm.State
}

func (vm *VM) status() worker.SandboxStatus {
	st := worker.SandboxStatus{ID: vm.ID, State: vm.state(), Spec: vm.Spec, DiskBytes: treeSize(vm.Root),
		MemoryBytes: int64(vm.Spec.MemoryMiB) << 20, Restored: vm.Spec.FromCheckpoint != ""}
	if st.State == worker.VMSuspended {
		st.SnapshotBytes = st.MemoryBytes
	}
	return st
}

func (w *Worker) PauseSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	vm, err := w.lifecycleStart(ctx, id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return w.move(vm, worker.VMPaused, worker.VMRunning, worker.VMPaused)
}

func (w *Worker) ResumeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	vm, err := w.lifecycleStart(ctx, id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return w.move(vm, worker.VMRunning, worker.VMRunning, worker.VMPaused)
}

func (w *Worker) SuspendSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	vm, err := w.lifecycleStart(ctx, id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return w.move(vm, worker.VMSuspended, worker.VMRunning, worker.VMPaused, worker.VMSuspended)
}

// WakeSandbox fails with WakeErr when set (e.g. an error wrapping
// errdefs.ErrDataLoss); the VM then stays as it was, like the real worker.
func (w *Worker) WakeSandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	vm, err := w.lifecycleStart(ctx, id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	w.mu.Lock()
	werr := w.WakeErr
	w.mu.Unlock()
	if werr != nil {
		return worker.SandboxStatus{}, werr
	}
	return w.move(vm, worker.VMRunning, worker.VMPaused, worker.VMSuspended, worker.VMRunning)
}

func (w *Worker) Checkpoint(ctx context.Context, sandboxID, checkpointID string) (worker.CheckpointStatus, error) {
	vm, err := w.lifecycleStart(ctx, sandboxID)
	if err != nil {
		return worker.CheckpointStatus{}, err
	}
	w.mu.Lock()
	state := vm.state()
	_, dup := w.ckpts[checkpointID]
	w.mu.Unlock()
	if state != worker.VMRunning && state != worker.VMPaused {
		return worker.CheckpointStatus{}, errdefs.New(errdefs.ErrConflict, "sandbox %s is %s", vm.ID, state).
			WithDetails(map[string]any{"state": string(state)})
	}
	if dup {
		return worker.CheckpointStatus{}, errdefs.New(errdefs.ErrConflict, "checkpoint %s exists", checkpointID)
	}
	procs, err := vm.client.List(ctx)
	if err != nil {
		return worker.CheckpointStatus{}, err
	}
	dir, err := os.MkdirTemp("", "space-api-ckpt-")
	if err != nil {
		return worker.CheckpointStatus{}, err
	}
	root := filepath.Join(dir, "root")
	if err := copyTree(vm.Root, root); err != nil {
		os.RemoveAll(dir)
		return worker.CheckpointStatus{}, err
	}
	ck := &checkpoint{root: root, status: worker.CheckpointStatus{ID: checkpointID, SandboxID: sandboxID, Spec: vm.Spec,
		CreatedAt: time.Now().UTC(), SizeBytes: treeSize(root)}, procs: procs}
	w.mu.Lock()
	closed := w.closed
	if !closed {
		w.ckpts[checkpointID] = ck
	}
	w.mu.Unlock()
	if closed {
		os.RemoveAll(dir)
		return worker.CheckpointStatus{}, errdefs.New(errdefs.ErrUnavailable, "the worker is closed")
	}
	return ck.status, nil
}

func (w *Worker) DeleteCheckpoint(ctx context.Context, checkpointID string) error {
	w.mu.Lock()
	ck := w.ckpts[checkpointID]
	delete(w.ckpts, checkpointID)
	w.mu.Unlock()
	if ck != nil {
		os.RemoveAll(filepath.Dir(ck.root))
	}
	return nil
}

func (w *Worker) Checkpoints(ctx context.Context) ([]worker.CheckpointStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []worker.CheckpointStatus
	for _, ck := range w.ckpts {
		out = append(out, ck.status)
	}
	return out, nil
}

// RestoreCheckpoint replaces the VM's root with the checkpoint's copy.
func (w *Worker) RestoreCheckpoint(ctx context.Context, sandboxID, checkpointID string) (worker.SandboxStatus, error) {
	vm, err := w.lifecycleStart(ctx, sandboxID)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	w.mu.Lock()
	ck := w.ckpts[checkpointID]
	w.mu.Unlock()
	if ck == nil {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrNotFound, "checkpoint %s not found", checkpointID)
	}
	if err := clearDir(vm.Root); err != nil {
		return worker.SandboxStatus{}, err
	}
	if err := copyTree(ck.root, vm.Root); err != nil {
		return worker.SandboxStatus{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	vm.State = worker.VMRunning
	return vm.status(), nil
}

func (w *Worker) PrepareTemplate(ctx context.Context, spec worker.SandboxSpec) error { return nil }

// ForgetTemplate records ref in Forgotten.
func (w *Worker) ForgetTemplate(ctx context.Context, ref string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Forgotten = append(w.Forgotten, ref)
	return nil
}

// ForgottenTemplates returns the references ForgetTemplate got, in order.
func (w *Worker) ForgottenTemplates() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.Forgotten...)
}

// branchRoot fills root from the checkpoint a branch is made of and returns
// the processes the checkpoint's agent knew.
func (w *Worker) branchRoot(spec *worker.SandboxSpec, root string) ([]agentproto.ProcessInfo, error) {
	w.mu.Lock()
	ck := w.ckpts[spec.FromCheckpoint]
	w.mu.Unlock()
	if ck == nil {
		return nil, errdefs.New(errdefs.ErrNotFound, "checkpoint %s not found", spec.FromCheckpoint)
	}
	base := ck.status.Spec
	spec.Template, spec.VCPUs, spec.MemoryMiB, spec.DiskMiB = base.Template, base.VCPUs, base.MemoryMiB, base.DiskMiB
	return ck.procs, copyTree(ck.root, root)
}

// InheritedOutput is what the stand-in of a process running at a
// checkpoint writes first in a branch of it.
const InheritedOutput = "inherited\n"

// inheritProcesses gives a branch's agent the processes of its checkpoint,
// as far as a fake can: a real branch's guest memory holds the very
// processes, here each gets a stand-in under the same process id. One that
// ran prints InheritedOutput and sleeps until signalled; one that had
// exited with a code exits with that code (signalled ones are left out).
//
// It returns the ids of the stand-ins it started, also when it fails.
func inheritProcesses(ctx context.Context, c *agentclient.Client, procs []agentproto.ProcessInfo) (standIns []string, err error) {
	for _, p := range procs {
		spec := agentproto.ProcessSpec{ID: p.ID, Shell: "echo inherited; exec sleep 600"}
		if p.Exit != nil {
			if p.Exit.ExitCode == nil {
				continue
			}
			spec.Shell = fmt.Sprintf("exit %d", *p.Exit.ExitCode)
		}
		if _, err := c.Start(ctx, spec); err != nil {
			return standIns, err
		}
		standIns = append(standIns, p.ID)
		if p.Exit == nil {
			continue
		}
		// Wait for the exit, so the branch's agent reports it as ended.
		ev, err := c.Events(ctx, p.ID, 0)
		if err != nil {
			return standIns, err
		}
		for {
			e, err := ev.Next()
			if err != nil || e.Type == agentproto.EventExit {
				ev.Close()
				if err != nil {
					return standIns, err
				}
				break
			}
		}
	}
	return standIns, nil
}

func clearDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies regular files, directories and symlinks from src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, in); err != nil {
				out.Close()
				return err
			}
			return out.Close()
		}
		return nil
	})
}

func treeSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
