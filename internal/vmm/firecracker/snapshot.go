package firecracker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
)

// StateFile is the device-state file (Firecracker's "snapshot_path")
// Snapshot writes into a snapshot dir.
//
// Guest RAM: Firecracker boots with anonymous memory and writes all of it
// at /snapshot/create. Snapshot has it write a new file and renames that
// over BootSpec.MemoryFile, where the worker expects the VM's RAM (and
// reflinks it into the snapshot). A restored VM maps its memory file
// privately (mem_backend File) and must never see it change: the worker
// gives each clone its own reflink, the jail binds it read-only, and a
// later Snapshot of the clone replaces the file by rename, never writing
// the inode that is mapped.
const StateFile = "vmstate"

// Snapshot implements vmm.Snapshotter: PUT /snapshot/create of the paused
// VM (a Full snapshot), then the memory moves to BootSpec.MemoryFile and
// the state into dir.
func (v *VM) Snapshot(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("firecracker: snapshot dir: %w: %v", errdefs.ErrInternal, err)
	}
	st, err := v.Status(ctx)
	if err != nil {
		return err
	}
	if st != "paused" {
		return fmt.Errorf("firecracker: snapshot of %s: vm is %s, not paused: %w", v.ID(), st, errdefs.ErrFailedPrecondition)
	}
	spec := v.Spec()
	// The VMM writes the snapshot into its run dir, where it could as well
	// leave a symlink or a hardlink: the files are taken through fds
	// (jail.MoveOut), and only as regular files of the VMM's own.
	run, err := jail.OpenDir(filepath.Join(v.stateDir(), dirRun))
	if err != nil {
		return fmt.Errorf("firecracker: snapshot: %w", err)
	}
	defer run.Close()
	for _, f := range []string{fileNewMemory, fileNewState} {
		_ = unix.Unlinkat(int(run.Fd()), f, 0)
	}
	defer func() {
		for _, f := range []string{fileNewMemory, fileNewState} {
			_ = unix.Unlinkat(int(run.Fd()), f, 0)
		}
	}()
	err = v.client().do(ctx, "PUT", "/snapshot/create", snapshotCreate{
		SnapshotPath: jailNewVM, MemFilePath: jailNewMem, SnapshotType: snapshotFull,
	}, nil, snapshotTimeout)
	if err != nil {
		return err
	}
	owner := v.vmmOwner()
	if err := jail.MoveOut(run, fileNewState, filepath.Join(dir, StateFile), owner); err != nil {
		return fmt.Errorf("firecracker: snapshot state: %w", err)
	}
	mem := spec.MemoryFile
	if mem == "" {
		mem = filepath.Join(dir, "memory")
	}
	if err := jail.MoveOut(run, fileNewMemory, mem, owner); err != nil {
		return fmt.Errorf("firecracker: snapshot memory: %w", err)
	}
	return nil
}

// vmmOwner accepts the uid the VMM runs as (root's for a VMM started
// without a jail).
func (v *VM) vmmOwner() jail.Owner {
	if j := v.rec.Jail; j != nil {
		return jail.OwnedBy(j.UID)
	}
	return jail.OwnedBy(0)
}

// Restore implements vmm.Restorer: a fresh Firecracker loads the
// snapshot's state with spec.MemoryFile (the caller's own copy of the
// snapshot's memory) as its memory, the NIC and the vsock socket
// overridden to this VM's. The VM comes back paused.
func (d *Driver) Restore(ctx context.Context, spec vmm.BootSpec, snapshotDir string) (vmm.VM, error) {
	if _, err := os.Stat(filepath.Join(snapshotDir, StateFile)); err != nil {
		return nil, fmt.Errorf("firecracker: restore: no state file in snapshot: %w", errdefs.ErrNotFound)
	}
	v, err := d.start(ctx, spec, true)
	if err != nil {
		return nil, err
	}
	if err := v.Incoming(ctx, snapshotDir); err != nil {
		return nil, err
	}
	return v, nil
}

// StartIncoming starts a Firecracker for spec that waits to load a
// snapshot (for pools: the process start off the request path). Its
// memory file and disks are fixed now, so they must already be the copies
// the restored VM will own.
func (d *Driver) StartIncoming(ctx context.Context, spec vmm.BootSpec) (vmm.VM, error) {
	v, err := d.start(ctx, spec, true)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Incoming loads snapshotDir into a VM started with StartIncoming. The VM
// stays paused; on error it is stopped.
func (v *VM) Incoming(ctx context.Context, snapshotDir string) error {
	if !v.rec.Incoming {
		return fmt.Errorf("firecracker: vm %s was not started to be restored: %w", v.ID(), errdefs.ErrFailedPrecondition)
	}
	fail := func(err error) error {
		_ = v.Stop(ctx)
		return err
	}
	// The state file is shared by every clone of the snapshot; each VMM
	// reads its own copy (small: device state only), owned by its uid. The
	// copy is made in the VMM's run dir, so through fds (jail.CreateIn).
	if err := v.copyState(snapshotDir); err != nil {
		return fail(err)
	}
	spec := v.Spec()
	load := snapshotLoad{
		SnapshotPath: jailVMState,
		MemBackend:   memoryBackend{BackendType: backendFile, BackendPath: jailMemory},
		ResumeVM:     false,
		// Each VMM has its own run dir at /run, so the snapshot's path
		// would do; the override says so rather than rely on it.
		VsockOverride: &vsockOverride{UDSPath: jailVsock},
	}
	if spec.Network != nil {
		load.NetworkOverrides = []networkOverride{{IfaceID: ifaceID, HostDevName: v.rec.Tap}}
	}
	if err := v.client().do(ctx, "PUT", "/snapshot/load", load, nil, snapshotTimeout); err != nil {
		return fail(err)
	}
	_ = os.Remove(filepath.Join(v.stateDir(), dirRun, fileLoadState))
	return nil
}

// copyState copies the snapshot's state file into the run dir as the
// VMM's own.
func (v *VM) copyState(snapshotDir string) error {
	sd, err := jail.OpenDir(snapshotDir)
	if err != nil {
		return fmt.Errorf("firecracker: restore: %w", err)
	}
	defer sd.Close()
	src, err := jail.OpenIn(sd, StateFile, os.O_RDONLY, jail.OwnedByHostOrVMM)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("firecracker: restore: no state file in snapshot: %w", errdefs.ErrNotFound)
		}
		return fmt.Errorf("firecracker: restore: %w", err)
	}
	defer src.Close()
	run, err := jail.OpenDir(filepath.Join(v.stateDir(), dirRun))
	if err != nil {
		return fmt.Errorf("firecracker: restore: %w", err)
	}
	defer run.Close()
	_ = unix.Unlinkat(int(run.Fd()), fileLoadState, 0)
	dst, err := jail.CreateIn(run, fileLoadState, 0o600)
	if err != nil {
		return fmt.Errorf("firecracker: restore: %w", err)
	}
	defer dst.Close()
	if _, err := io.Copy(dst, src); err != nil {
		return fmt.Errorf("firecracker: restore: copy state: %w: %v", errdefs.ErrInternal, err)
	}
	if j := v.rec.Jail; j != nil && j.UID != 0 {
		if err := jail.Give(dst, j.UID); err != nil {
			return fmt.Errorf("firecracker: restore: %w", err)
		}
	}
	return nil
}

// Relocate tells the VM that the caller renamed its state dir, memory file
// and disks (on one filesystem, while it ran) to those of spec, and gives
// it spec.ID. Firecracker keeps its open files and mappings, and its
// sockets live in the run dir inside the state dir; the record is
// rewritten so that Recover finds the VM under its new name.
func (v *VM) Relocate(spec vmm.BootSpec) error {
	spec, err := spec.Absolute()
	if err != nil {
		return fmt.Errorf("firecracker: relocate: %w: %v", errdefs.ErrInvalidArgument, err)
	}
	v.stopMu.Lock()
	defer v.stopMu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.isStopping || v.detached {
		return fmt.Errorf("firecracker: relocate %s: vm is stopped: %w", v.rec.Spec.ID, errdefs.ErrFailedPrecondition)
	}
	rec := v.rec
	rec.Spec = spec
	if err := writeRecord(spec.StateDir, rec); err != nil {
		return fmt.Errorf("firecracker: relocate %s: record: %w: %v", v.rec.Spec.ID, errdefs.ErrInternal, err)
	}
	v.rec = rec
	v.dir = spec.StateDir
	v.log = v.d.log.With("vm", spec.ID, "pid", rec.PID)
	v.api = newClient(filepath.Join(spec.StateDir, dirRun, fileAPI))
	return nil
}

// The abilities the worker relies on, checked by the compiler.
var (
	_ vmm.IncomingStarter = (*Driver)(nil)
	_ vmm.Checker         = (*Driver)(nil)
	_ vmm.IncomingVM      = (*VM)(nil)
	_ vmm.StatusReporter  = (*VM)(nil)
)
