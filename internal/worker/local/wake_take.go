package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// takeWakeSlot gives sb a pre-started VMM (wake_pool.go) for snapshot snap
// of manifest m: the snapshot's memory file and disk reflinked onto the
// slot's files, files and state dir renamed into sb's dir, the VMM told
// (Relocate), and with networking the slot's tap made the tap of sb's
// namespace (wake_net.go). The VMM still waits for its device state (Incoming). It
// returns nil when no slot of m's shape is ready or the slot could not be
// made sb's; then sb's files are as before (none) and the caller restores
// on a VMM of its own.
func (w *Worker) takeWakeSlot(ctx context.Context, sb *sandbox, snap string, m manifest) vmm.VM {
	set, err := deviceSetOf(m)
	if w.wakes.Pool == nil || err != nil || m.Files[memFile].Size != int64(m.MemoryMiB)<<20 {
		return nil
	}
	sl := w.wakes.take(wakeShape{VCPUs: m.VCPUs, MemoryMiB: m.MemoryMiB, DiskBytes: m.Files[diskFile].Size, DeviceSet: set})
	if sl == nil {
		return nil
	}
	if err := w.placeOnSlot(ctx, sb, snap, m, sl); err != nil {
		w.log.Warn("pre-started vm unusable: starting one", "sandbox", sb.spec.ID, "err", causeOf(err))
		w.wakes.Discard(sl)
		_ = os.Remove(sb.path(memFile))
		_ = os.Remove(sb.path(diskFile))
		_ = os.MkdirAll(sb.path(vmDir), 0o700)
		return nil
	}
	return sl.vm
}

// placeOnSlot does takeWakeSlot's work on slot sl. On error the caller
// stops sl's VMM and removes sb's files.
func (w *Worker) placeOnSlot(ctx context.Context, sb *sandbox, snap string, m manifest, sl *wakeSlot) error {
	for _, f := range []string{memFile, diskFile} {
		if err := cloneOnto(filepath.Join(snap, f), filepath.Join(sl.dir, f)); err != nil {
			return w.classifyDisk("copy snapshot "+f+" onto the pre-started vm's", err)
		}
	}
	// os.Rename refuses an existing directory as the target, even empty;
	// the old VM's files left it when that VM stopped.
	if err := os.Remove(sb.path(vmDir)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("replace vm dir: %w: %v", errdefs.ErrInternal, err)
	}
	for _, f := range []string{memFile, diskFile, vmDir} {
		_ = os.Remove(sb.path(f))
		if err := os.Rename(filepath.Join(sl.dir, f), sb.path(f)); err != nil {
			return fmt.Errorf("move pre-started %s: %w: %v", f, errdefs.ErrInternal, err)
		}
	}
	_ = os.Remove(sl.dir)
	// From here sl's VM is recorded under sb's dir: stopping it removes
	// the record too.
	spec, err := w.restoreSpec(sb, m)
	if err != nil {
		return err
	}
	if err := sl.vm.(vmm.IncomingVM).Relocate(spec); err != nil {
		return err
	}
	// Last, so that a failure before leaves sb's namespace untouched; no
	// vCPU has run, and none runs before the tap is sb's (wake_net.go).
	return w.moveSlotNet(ctx, sb, sl)
}

// cloneOnto replaces the content of the existing file dst (same size as
// src) by a reflink of src's, in place: the inode stays the one others
// hold open or mapped, and the kernel drops and unmaps its old pages.
func cloneOnto(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrInternal, err)
	}
	si, err1 := in.Stat()
	di, err2 := out.Stat()
	if err1 != nil || err2 != nil || si.Size() != di.Size() {
		out.Close()
		return fmt.Errorf("sizes differ or unknown: %w", errdefs.ErrInternal)
	}
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
		out.Close()
		if err == unix.ENOSPC {
			return snapfile.DiskError("reflink", err)
		}
		return fmt.Errorf("reflink: %w: %v", errdefs.ErrInternal, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrInternal, err)
	}
	return nil
}
