package vmm

import "context"

// The optional abilities below are found with a type assertion, like
// Pauser and Snapshotter; vmmtest checks each one a driver offers.

// RunState is what a VM's vCPUs are doing, in the driver-neutral words a
// worker acts on (QEMU and Firecracker name their states differently).
type RunState string

const (
	// RunRunning: the vCPUs run.
	RunRunning RunState = "running"
	// RunPaused: the vCPUs are stopped (by Pause, or after a snapshot was
	// written) and Resume runs them again.
	RunPaused RunState = "paused"
	// RunSaving: a snapshot is still being written; ask again.
	RunSaving RunState = "saving"
	// RunNotStarted: the VM waits for a snapshot to load (IncomingStarter)
	// or has not booted; Resume cannot help it.
	RunNotStarted RunState = "not_started"
	// RunBroken: the VM cannot run again as it is (its device model
	// failed, its guest panicked).
	RunBroken RunState = "broken"
)

// StatusReporter is a VM that says what its vCPUs are doing. A worker that
// adopts a VM after a restart asks it, so the sandbox's state follows the
// VM's and not what the previous worker process believed.
type StatusReporter interface {
	RunState(ctx context.Context) (RunState, error)
}

// IncomingStarter is a Driver that starts a VMM ahead of a restore: the
// process runs and waits (RunNotStarted) until IncomingVM.Incoming gives it
// a snapshot, so a warm pool pays the VMM's start before any create does.
// Its memory file and disks are fixed at the start, so they must be the
// copies the restored VM will own.
type IncomingStarter interface {
	StartIncoming(ctx context.Context, spec BootSpec) (VM, error)
}

// IncomingVM is a VM started by IncomingStarter.
type IncomingVM interface {
	// Incoming loads the device state of a snapshot (Snapshotter's dir);
	// the VM stays paused. On error the VM is stopped.
	Incoming(ctx context.Context, snapshotDir string) error
	// Relocate tells the VM that the caller renamed its state dir, memory
	// file and disks (on one filesystem, while it ran) to those of spec and
	// gives it spec.ID; Recover then finds it under the new state dir.
	Relocate(spec BootSpec) error
}

// Checker is a Driver that checks, before it is used, that the host can run
// it (binary, devices, accelerator), with an error that names what is
// missing (errdefs.ErrFailedPrecondition).
type Checker interface {
	Check(ctx context.Context) error
}
