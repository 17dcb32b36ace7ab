package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/worker/local/prestart"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// Wake slots take the VMM's start off the wake path, as the create pool
// does for creates (pool.go), but a wake cannot take a VM already restored:
// its snapshot is the sandbox's own. A slot is a VMM started ahead and
// jailed like every VMM, waiting on -incoming defer with vCPUs held (-S), of
// a shape (vCPUs, guest memory, disk size) that recent suspends on this
// worker had, on files of its own under <storage root>/wakepool/<slot>/: a
// sparse memory file of the guest's size and a sparse disk of the
// sandbox's size. QEMU has mapped the memory file (MAP_SHARED) and holds
// the disk's fd, but in the incoming state it writes neither: ROM contents
// are not copied into RAM while a migration is awaited, and no vCPU runs.
//
// A wake of that shape takes a slot and reflinks the snapshot's memory
// file and disk ONTO the slot's files (FICLONE into the open inode QEMU
// holds: btrfs writes back and drops the destination's page cache and
// unmaps it from every process while it excludes page faults, so QEMU's
// next touch of a guest page reads the snapshot's extent), renames files
// and state dir into the sandbox's dir (QEMU keeps its fds and its
// sockets, bound relative to the state dir; the jail's bind mounts follow
// the renamed dentries), then feeds the device state (virtio's load reads
// guest RAM, so the memory is in place before). The snapshot is verified
// meanwhile, reading the very inodes the VM maps, and no vCPU runs before
// the verdict (restore.go).
//
// Policy: up to WakePoolSize slots (default 1) for each of the last
// wakeShapes shapes suspended or woken here, within WakePoolMemoryMiB of
// guest memory (default 4096). An idle slot costs QEMU's own memory (its
// files are sparse and untouched); the budget bounds what slots could
// touch once taken. A slot that dies while idle is discarded.
//
// With networking a slot's NIC is on the tap of a namespace of its own,
// acquired under a placeholder id (wvm-<slot>) and built like every
// sandbox's (deny-all rules, no listeners: the guest does not run there
// anyway). A wake keeps the sandbox's own namespace, its egress listeners
// and the connections they hold (the guest's TCP state is in the
// snapshot), so the take moves the slot's tap into it instead
// (network.Manager.MoveTap, wake_net.go): renamed tap0 there, replacing
// the sandbox's idle one, with the gateway's MAC and address; the rules
// match the tap by name, so the sandbox's policy is in force before the
// vCPUs run. Guest MAC and addresses are the same in every sandbox
// (network.GuestMAC, GuestAddr), so the NIC the slot was started with is
// the one the snapshot's guest expects. The placeholder namespace is then
// released; its kernel object lives on, nameless and unreachable, until
// the VMM closes the tap (the tap's socket holds it).

const (
	// DefaultWakePoolSize is Config.WakePoolSize when zero.
	DefaultWakePoolSize = 1
	// DefaultWakePoolMemoryMiB is Config.WakePoolMemoryMiB when zero.
	DefaultWakePoolMemoryMiB = 4096
	wakePoolDir              = "wakepool"
	// wakeShapes is how many recent shapes the slots are kept for.
	wakeShapes = 4
	// wakeRefillDelay: see take. A suspend asks at once (the filler still
	// waits poolRefillDelay): its VMM is gone, the wake is yet to come.
	wakeRefillDelay = 2 * time.Second
)

// wakeShape is what a VMM started ahead must match: the device set of the
// snapshot's VM.
type wakeShape struct {
	VCPUs, MemoryMiB int
	DiskBytes        int64
	DeviceSet        int // devices.go
}

type wakeSlot struct {
	dir   string
	vm    vmm.VM
	shape wakeShape
	// netns is the namespace the slot's tap was made in (nil without
	// networking); a take moves the tap out and releases it.
	netns *network.Sandbox
}

// wakePool is the worker's wake slots, by shape; with a nil Pool when
// slots do not apply (every method is safe then, and finds nothing).
type wakePool struct {
	*prestart.Pool[wakeShape, wakeShape, *wakeSlot]
}

func (w *Worker) wakePoolRoot() string { return filepath.Join(w.cfg.Storage.Root(), wakePoolDir) }

// startWakePool reaps what an earlier process left and, when slots apply,
// starts the filler.
func (w *Worker) startWakePool(ctx context.Context) {
	w.reapDirVMs(ctx, w.wakePoolRoot())
	_, ok := w.cfg.Driver.(vmm.IncomingStarter)
	if !ok || !w.canSnapshot() || w.cfg.WakePoolSize < 0 {
		return
	}
	cfg := prestart.Config[wakeShape, wakeShape, *wakeSlot]{
		Size: w.cfg.WakePoolSize, BudgetMiB: w.cfg.WakePoolMemoryMiB, MaxTargets: wakeShapes,
		// Let the wake or suspend that asked finish before the start
		// competes with it for the CPU.
		Settle:  poolRefillDelay,
		MemMiB:  func(s wakeShape) int { return s.MemoryMiB },
		Make:    func(ctx context.Context, s, _ wakeShape) (*wakeSlot, error) { return w.makeWakeSlot(ctx, s) },
		Dead:    func(sl *wakeSlot) bool { return isDone(sl.vm) },
		Discard: w.discardWakeSlot,
		Failed: func(_, _ wakeShape, err error) {
			w.log.Warn("wake slot not made", "err", causeOf(err))
		},
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultWakePoolSize
	}
	if cfg.BudgetMiB <= 0 {
		cfg.BudgetMiB = DefaultWakePoolMemoryMiB
	}
	w.wakes = wakePool{prestart.New(ctx, cfg)}
}

// reapDirVMs stops the VMs under root's entries and removes them.
func (w *Worker) reapDirVMs(ctx context.Context, root string) {
	dirs, _ := filepath.Glob(filepath.Join(root, "*"))
	for _, d := range dirs {
		if vm, err := w.cfg.Driver.Recover(ctx, filepath.Join(d, vmDir)); err == nil {
			_ = vm.Stop(ctx)
		}
		if err := os.RemoveAll(d); err != nil {
			w.log.Warn("remove pre-started vm", "dir", filepath.Base(d), "err", err)
		}
	}
}

// shapeOf is the shape of sb's VM as it runs now (its disk is on disk).
func shapeOf(sb *sandbox) (wakeShape, bool) {
	st, err := os.Stat(sb.path(diskFile))
	if err != nil {
		return wakeShape{}, false
	}
	return wakeShape{VCPUs: sb.spec.VCPUs, MemoryMiB: sb.spec.MemoryMiB, DiskBytes: st.Size(), DeviceSet: sb.devices}, true
}

// want makes s the most recent shape (slots of shapes that fall off the
// list are stopped) and has the filler start what is missing.
func (p wakePool) want(s wakeShape) {
	p.Want(s, s)
	p.Poke()
}

// take returns a slot of shape s, or nil; either way s becomes the most
// recent shape, and its slot is made again wakeRefillDelay later, so that
// the new VMM's start does not compete with this wake's first commands.
func (p wakePool) take(s wakeShape) *wakeSlot {
	if p.Pool == nil {
		return nil
	}
	p.Want(s, s)
	time.AfterFunc(wakeRefillDelay, p.Poke)
	sl, _ := p.Take(s)
	return sl
}

func (w *Worker) discardWakeSlot(sl *wakeSlot) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sl.vm.Stop(ctx); err != nil {
		w.log.Warn("stop pre-started vm", "err", err)
	}
	w.releaseSlotNet(ctx, sl)
	_ = os.RemoveAll(sl.dir)
}

// makeWakeSlot starts a VMM of shape s waiting for a snapshot, on sparse
// files of its own.
func (w *Worker) makeWakeSlot(ctx context.Context, s wakeShape) (_ *wakeSlot, err error) {
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	dir := filepath.Join(w.wakePoolRoot(), hex.EncodeToString(suffix))
	if err := os.MkdirAll(filepath.Join(dir, vmDir), 0o700); err != nil {
		return nil, snapfile.DiskError("wake slot dir", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := createMemFile(filepath.Join(dir, memFile), s.MemoryMiB); err != nil {
		return nil, err
	}
	if err := createSparse(filepath.Join(dir, diskFile), s.DiskBytes); err != nil {
		return nil, err
	}
	sl := &wakeSlot{dir: dir, shape: s}
	nic, err := w.slotNet(ctx, sl)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.releaseSlotNet(context.WithoutCancel(ctx), sl)
		}
	}()
	vm, err := w.cfg.Driver.(vmm.IncomingStarter).StartIncoming(ctx, vmm.BootSpec{
		ID: "wake-" + filepath.Base(dir), StateDir: filepath.Join(dir, vmDir),
		Kernel: w.cfg.Kernel, Initrd: w.cfg.Initrd, Disks: []vmm.Disk{{Path: filepath.Join(dir, diskFile)}},
		VCPUs: s.VCPUs, MemoryMiB: s.MemoryMiB, MemoryFile: filepath.Join(dir, memFile), Network: nic,
		FreePageReporting: freePageReporting(s.DeviceSet),
	})
	if err != nil {
		return nil, fmt.Errorf("start pre-started vm: %w", err)
	}
	if _, ok := vm.(vmm.IncomingVM); !ok {
		_ = vm.Stop(ctx)
		return nil, fmt.Errorf("pre-started vm cannot be restored")
	}
	sl.vm = vm
	return sl, nil
}

func createSparse(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return snapfile.DiskError("wake slot disk", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return snapfile.DiskError("wake slot disk", err)
	}
	return nil
}

// WakePoolStats reports the wake slots (zero when they do not apply).
func (w *Worker) WakePoolStats() PoolStats { return w.wakes.Stats() }
