package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
)

// StateFile is the device-state file Snapshot writes into a snapshot dir.
// When BootSpec.MemoryFile is set, guest RAM is not in it (x-ignore-shared):
// the caller must keep an immutable copy (reflink) of the memory file taken
// while the VM is paused, and restore with a clone of that copy.
const StateFile = "vmstate"

// migrationFD names the fd of a migration stream in QMP.
const migrationFD = "migration"

// Snapshot implements vmm.Snapshotter by migrating the paused VM to a file.
func (v *VM) Snapshot(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("qemu: snapshot dir: %w: %v", errdefs.ErrInternal, err)
	}
	st, err := v.Status(ctx)
	if err != nil {
		return err
	}
	if st != "paused" && st != "postmigrate" {
		return fmt.Errorf("qemu: snapshot of %s: vm is %s, not paused: %w", v.ID(), st, errdefs.ErrFailedPrecondition)
	}
	if err := v.setIgnoreShared(ctx); err != nil {
		return err
	}
	// The worker writes the file; the jailed VMM only gets the fd.
	f, err := os.OpenFile(filepath.Join(dir, StateFile), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("qemu: snapshot file: %w: %v", errdefs.ErrInternal, err)
	}
	defer f.Close()
	if err := v.qmp.SendFile(ctx, migrationFD, f); err != nil {
		return err
	}
	if err := v.qmp.Execute(ctx, "migrate", map[string]any{"uri": "fd:" + migrationFD}, nil); err != nil {
		return err
	}
	if err := v.awaitMigration(ctx); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("qemu: snapshot file: %w: %v", errdefs.ErrInternal, err)
	}
	return f.Close()
}

func (v *VM) setIgnoreShared(ctx context.Context) error {
	if v.rec.Spec.MemoryFile == "" {
		return nil
	}
	return v.qmp.Execute(ctx, "migrate-set-capabilities", map[string]any{
		"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": true}},
	}, nil)
}

// awaitMigration polls query-migrate until the migration ends.
func (v *VM) awaitMigration(ctx context.Context) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := v.qmp.Execute(ctx, "query-migrate", nil, &st); err != nil {
			return err
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("qemu: migration of %s %s: %s: %w", v.ID(), st.Status, st.ErrorDesc, errdefs.ErrInternal)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("qemu: migration of %s: %w", v.ID(), errdefs.ErrDeadlineExceeded)
		case <-v.done:
			return fmt.Errorf("qemu: migration of %s: vmm exited: %w", v.ID(), errdefs.ErrUnavailable)
		case <-t.C:
		}
	}
}

// Restore implements vmm.Restorer: it starts QEMU waiting for an incoming
// migration and feeds it the snapshot's state file. The VM comes back
// paused. spec must describe the same devices as the snapshotted VM.
func (d *Driver) Restore(ctx context.Context, spec vmm.BootSpec, snapshotDir string) (vmm.VM, error) {
	path, err := filepath.Abs(filepath.Join(snapshotDir, StateFile))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("qemu: restore: no state file in snapshot: %w", errdefs.ErrNotFound)
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
