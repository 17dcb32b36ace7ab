package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
)

// Restore in two steps, for pools that take process start and state load
// off the request path: StartIncoming starts a VMM waiting for an incoming
// migration (-incoming defer, vCPUs held by -S), Incoming feeds it a
// snapshot, and Relocate moves it under the state dir and files of the
// sandbox that takes it. Restore is the two first steps in one.

// StartIncoming starts a VMM for spec that waits to be restored. Its memory
// file and disks are fixed now, so they must already be the copies the
// restored VM will own.
func (d *Driver) StartIncoming(ctx context.Context, spec vmm.BootSpec) (vmm.VM, error) {
	v, err := d.start(ctx, spec, true)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Incoming loads the device state of snapshotDir into a VM started with
// StartIncoming. The VM stays paused; on error it is stopped.
func (v *VM) Incoming(ctx context.Context, snapshotDir string) error {
	if !v.rec.Incoming {
		return fmt.Errorf("qemu: vm %s was not started to be restored: %w", v.ID(), errdefs.ErrFailedPrecondition)
	}
	f, err := os.Open(filepath.Join(snapshotDir, StateFile))
	if err != nil {
		_ = v.Stop(ctx)
		return fmt.Errorf("qemu: restore: no state file in snapshot: %w", errdefs.ErrNotFound)
	}
	defer f.Close()
	fail := func(err error) error {
		_ = v.Stop(ctx)
		return err
	}
	if err := v.setIgnoreShared(ctx); err != nil {
		return fail(err)
	}
	if err := v.qmp.SendFile(ctx, migrationFD, f); err != nil {
		return fail(err)
	}
	if err := v.qmp.Execute(ctx, "migrate-incoming", map[string]any{"uri": "fd:" + migrationFD}, nil); err != nil {
		return fail(err)
	}
	if err := v.awaitMigration(ctx); err != nil {
		return fail(err)
	}
	return nil
}

// Relocate tells the VM that the caller renamed its state dir, memory file
// and disks (on one filesystem, while it ran) to those of spec, and gives it
// spec.ID. QEMU keeps its open files and its sockets, which it bound
// relative to its working directory, the state dir itself; the record is
// rewritten so that Recover finds the VM under its new name.
func (v *VM) Relocate(spec vmm.BootSpec) error {
	spec, err := spec.Absolute()
	if err != nil {
		return fmt.Errorf("qemu: relocate: %w: %v", errdefs.ErrInvalidArgument, err)
	}
	v.stopMu.Lock()
	defer v.stopMu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.stopping || v.detached {
		return fmt.Errorf("qemu: relocate %s: vm is stopped: %w", v.ID(), errdefs.ErrFailedPrecondition)
	}
	rec := v.rec
	rec.Spec = spec
	if err := writeRecord(spec.StateDir, rec); err != nil {
		return fmt.Errorf("qemu: relocate %s: record: %w: %v", v.ID(), errdefs.ErrInternal, err)
	}
	v.rec = rec
	v.dir = spec.StateDir
	v.log = v.d.log.With("vm", spec.ID, "pid", rec.PID)
	v.cons.mu.Lock()
	v.cons.dir = spec.StateDir
	v.cons.mu.Unlock()
	return nil
}

// The abilities the worker relies on, checked by the compiler.
var (
	_ vmm.IncomingStarter = (*Driver)(nil)
	_ vmm.Checker         = (*Driver)(nil)
	_ vmm.IncomingVM      = (*VM)(nil)
	_ vmm.StatusReporter  = (*VM)(nil)
)
