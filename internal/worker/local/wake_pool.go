package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/vmm"
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

// wakePool is the worker's wake slots.
type wakePool struct {
	w         *Worker
	size      int
	budgetMiB int

	ctx    context.Context
	cancel context.CancelFunc
	kick   chan struct{}
	done   chan struct{}

	mu      sync.Mutex
	shapes  []wakeShape // most recent first
	ready   map[wakeShape][]*wakeSlot
	usedMiB int
	failed  map[wakeShape]time.Time
	stats   PoolStats
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
	p := &wakePool{
		w: w, size: w.cfg.WakePoolSize, budgetMiB: w.cfg.WakePoolMemoryMiB,
		kick: make(chan struct{}, 1), done: make(chan struct{}),
		ready: map[wakeShape][]*wakeSlot{}, failed: map[wakeShape]time.Time{},
	}
	if p.size == 0 {
		p.size = DefaultWakePoolSize
	}
	if p.budgetMiB <= 0 {
		p.budgetMiB = DefaultWakePoolMemoryMiB
	}
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	w.wakes = p
	go p.run()
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

// want makes s the most recent shape and has the filler start what is
// missing.
func (p *wakePool) want(s wakeShape) {
	if p == nil {
		return
	}
	p.remember(s)
	p.poke()
}

// remember makes s the most recent shape; slots of shapes that fall off
// the list are stopped.
func (p *wakePool) remember(s wakeShape) {
	p.mu.Lock()
	kept := []wakeShape{s}
	for _, o := range p.shapes {
		if o != s && len(kept) < wakeShapes {
			kept = append(kept, o)
		}
	}
	p.shapes = kept
	var drop []*wakeSlot
	for sh, ss := range p.ready {
		if !p.wanted(sh) {
			drop = append(drop, ss...)
			for _, sl := range ss {
				p.usedMiB -= sl.shape.MemoryMiB
			}
			delete(p.ready, sh)
		}
	}
	p.mu.Unlock()
	for _, sl := range drop {
		go p.discard(sl)
	}
}

func (p *wakePool) wanted(s wakeShape) bool {
	for _, o := range p.shapes {
		if o == s {
			return true
		}
	}
	return false
}

func (p *wakePool) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// take returns a slot of shape s, or nil; either way s becomes the most
// recent shape, and its slot is made again wakeRefillDelay later, so that
// the new VMM's start does not compete with this wake's first commands.
func (p *wakePool) take(s wakeShape) *wakeSlot {
	if p == nil {
		return nil
	}
	p.remember(s)
	time.AfterFunc(wakeRefillDelay, p.poke)
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.ready[s]) > 0 {
		sl := p.ready[s][0]
		p.ready[s] = p.ready[s][1:]
		p.usedMiB -= sl.shape.MemoryMiB
		select {
		case <-sl.vm.Done(): // died while idle
			go p.discard(sl)
			continue
		default:
		}
		p.stats.Taken++
		return sl
	}
	return nil
}

// next picks a shape short of slots and reserves its memory.
func (p *wakePool) next() (wakeShape, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.shapes {
		if len(p.ready[s]) >= p.size || p.usedMiB+s.MemoryMiB > p.budgetMiB {
			continue
		}
		if at, ok := p.failed[s]; ok && time.Since(at) < 30*time.Second {
			continue
		}
		p.usedMiB += s.MemoryMiB
		return s, true
	}
	return wakeShape{}, false
}

func (p *wakePool) run() {
	defer close(p.done)
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.kick:
		}
		// Let the wake or suspend that asked finish before the start
		// competes with it for the CPU.
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(poolRefillDelay):
		}
		for p.ctx.Err() == nil {
			s, ok := p.next()
			if !ok {
				break
			}
			sl, err := p.w.makeWakeSlot(p.ctx, s)
			p.mu.Lock()
			if err != nil || !p.wanted(s) {
				p.usedMiB -= s.MemoryMiB
				if err != nil {
					p.failed[s] = time.Now()
				}
				p.mu.Unlock()
				if err != nil && p.ctx.Err() == nil {
					p.w.log.Warn("wake slot not made", "err", causeOf(err))
				}
				if sl != nil {
					p.discard(sl)
				}
				continue
			}
			delete(p.failed, s)
			p.stats.Made++
			p.ready[s] = append(p.ready[s], sl)
			p.mu.Unlock()
		}
	}
}

// close stops the filler and every slot's VMM, and removes their files.
func (p *wakePool) close() {
	if p == nil {
		return
	}
	p.cancel()
	<-p.done
	p.mu.Lock()
	var all []*wakeSlot
	for s, ss := range p.ready {
		all = append(all, ss...)
		delete(p.ready, s)
	}
	p.usedMiB = 0
	p.mu.Unlock()
	for _, sl := range all {
		p.discard(sl)
	}
}

func (p *wakePool) discard(sl *wakeSlot) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sl.vm.Stop(ctx); err != nil {
		p.w.log.Warn("stop pre-started vm", "err", err)
	}
	p.w.releaseSlotNet(ctx, sl)
	_ = os.RemoveAll(sl.dir)
}

// makeWakeSlot starts a VMM of shape s waiting for a snapshot, on sparse
// files of its own.
func (w *Worker) makeWakeSlot(ctx context.Context, s wakeShape) (_ *wakeSlot, err error) {
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	dir := filepath.Join(w.wakePoolRoot(), hex.EncodeToString(suffix))
	if err := os.MkdirAll(filepath.Join(dir, vmDir), 0o700); err != nil {
		return nil, diskError("wake slot dir", err)
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
		return diskError("wake slot disk", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return diskError("wake slot disk", err)
	}
	return nil
}

// WakePoolStats reports the wake slots (zero when they do not apply).
func (w *Worker) WakePoolStats() PoolStats {
	p := w.wakes
	if p == nil {
		return PoolStats{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	for _, ss := range p.ready {
		st.Ready += len(ss)
	}
	return st
}
