package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/worker/local/prestart"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// Pools take VMM start-up and the device-state load off the create path.
// For every template snapshot a create has used (or PrepareTemplate made),
// a background filler keeps up to PoolSize VMs restored from it (a VMM
// started with -incoming defer, then fed the snapshot's device state),
// warmed (warmPoolEntry) and idling with their agent link up, each on its
// own reflink copies of the snapshot's memory file and disk under
// <storage root>/pool/<name>/. A create takes one, renames its files and
// state dir into the sandbox's dir (QEMU keeps its open files and its
// sockets, bound relative to the state dir), takes over its agent link and
// configures the agent with the sandbox's identity, fresh entropy and the
// clock, exactly as after a restore. Pool VMs are never sandboxes: adoption never looks under pool/,
// Close stops them, and New reaps any a crashed process left.
//
// Pools need a driver that restores in two steps (vmm.IncomingStarter). With
// networking, each pooled VM has a namespace of its own, acquired under a
// placeholder id (pvm-<entry>) and built like every sandbox's (deny-all
// nftables, the same tap and addresses), with its NIC on the tap. No egress
// listeners are open in it while pooled: guest TCP and DNS are redirected
// to ports nothing listens on, so a pooled VM reaches nothing (and its guest
// NIC has no address until configure). A take renames the namespace to the
// sandbox's (QEMU keeps its tap fd: the tap belongs to the namespace, not to
// its name), then opens and attaches the egress listeners under the
// sandbox's policy. Close and discard release the namespace; New reaps the
// ones a crashed process left (they are this instance's, and no sandbox's).

const (
	// DefaultPoolSize is Config.PoolSize when zero.
	DefaultPoolSize = 2
	// DefaultPoolMemoryMiB is Config.PoolMemoryMiB when zero.
	DefaultPoolMemoryMiB = 4096
	poolDir              = "pool"
	// poolRefillDelay lets the create that took an entry finish before the
	// refill competes with it for the CPU.
	poolRefillDelay = 300 * time.Millisecond
)

type poolEntry struct {
	dir    string
	vm     vmm.VM
	memMiB int
	// client holds the link to the pooled VM's agent; a take hands it to
	// the sandbox (dial switched to the sandbox's), so the link that is up
	// stays up.
	client *agentclient.Client
	dial   *dialSwitch
	// netns is the pooled VM's namespace (nil without networking); a take
	// hands it to the sandbox and clears it.
	netns *network.Sandbox
}

// dialSwitch is a DialFunc whose target can be changed.
type dialSwitch struct {
	mu sync.Mutex
	f  agentclient.DialFunc
}

func (d *dialSwitch) dial(ctx context.Context) (net.Conn, error) {
	d.mu.Lock()
	f := d.f
	d.mu.Unlock()
	return f(ctx)
}

func (d *dialSwitch) set(f agentclient.DialFunc) {
	d.mu.Lock()
	d.f = f
	d.mu.Unlock()
}

type poolTarget struct {
	snap string
	m    manifest
}

// vmPool is the worker's create pools, one per template snapshot (its
// dir), each entry a restored VM; with a nil Pool when pools do not apply
// (every method is safe then, and finds nothing).
type vmPool struct {
	*prestart.Pool[string, poolTarget, *poolEntry]
}

func (w *Worker) poolRoot() string { return filepath.Join(w.cfg.Storage.Root(), poolDir) }

// startPool reaps what an earlier process left in the pool dir and, when
// pools apply, starts the filler.
func (w *Worker) startPool(ctx context.Context) {
	w.reapDirVMs(ctx, w.poolRoot())
	_, ok := w.cfg.Driver.(vmm.IncomingStarter)
	if !ok || !w.canSnapshot() || w.cfg.PoolSize < 0 {
		return
	}
	cfg := prestart.Config[string, poolTarget, *poolEntry]{
		Size: w.cfg.PoolSize, BudgetMiB: w.cfg.PoolMemoryMiB,
		MemMiB: func(t poolTarget) int { return t.m.MemoryMiB },
		Make:   func(ctx context.Context, _ string, t poolTarget) (*poolEntry, error) { return w.makePoolEntry(ctx, t) },
		Dead:   func(e *poolEntry) bool { return isDone(e.vm) },
		// Under its build's lock, so ForgetTemplate never removes t's files
		// while they are read, nor misses the entry made of them; while a
		// forget of the build waits, the others' fills go on.
		Lock:    func(_ string, t poolTarget) (func(), bool) { return w.lockPoolTarget(t) },
		Discard: w.discardPoolEntry,
		Failed: func(snap string, _ poolTarget, err error) {
			w.log.Warn("pool entry not made", "snapshot", filepath.Base(snap), "err", causeOf(err))
		},
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultPoolSize
	}
	if cfg.BudgetMiB <= 0 {
		cfg.BudgetMiB = DefaultPoolMemoryMiB
	}
	w.pool = vmPool{prestart.New(ctx, cfg)}
}

// isDone reports whether vm has exited.
func isDone(vm vmm.VM) bool {
	select {
	case <-vm.Done():
		return true
	default:
		return false
	}
}

// want makes snap a template the pool keeps VMs of.
func (p vmPool) want(snap string, m manifest) {
	if p.Want(snap, poolTarget{snap: snap, m: m}) {
		p.Poke()
	}
}

// take returns a pooled VM restored from snap, or nil. A take refills
// poolRefillDelay later, a miss at once.
func (p vmPool) take(snap string) *poolEntry {
	e, ok := p.Take(snap)
	if !ok {
		p.Poke()
		return nil
	}
	time.AfterFunc(poolRefillDelay, p.Poke)
	return e
}

func (w *Worker) discardPoolEntry(e *poolEntry) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.client.Close()
	if err := e.vm.Stop(ctx); err != nil {
		w.log.Warn("stop pool vm", "err", err)
	}
	if e.netns != nil {
		if err := w.cfg.Network.Release(ctx, e.netns); err != nil {
			w.log.Warn("release pool vm network", "err", err)
		}
	}
	_ = os.RemoveAll(e.dir)
}

// makePoolEntry restores a paused VM from t on its own copies of the files.
func (w *Worker) makePoolEntry(ctx context.Context, t poolTarget) (_ *poolEntry, err error) {
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	dir := filepath.Join(w.poolRoot(), hex.EncodeToString(suffix))
	if err := os.MkdirAll(filepath.Join(dir, vmDir), 0o700); err != nil {
		return nil, snapfile.DiskError("pool dir", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	set, err := deviceSetOf(t.m)
	if err != nil {
		return nil, err
	}
	if err := w.cfg.Storage.EnsureFree(ctx, snapshotMargin); err != nil {
		return nil, err
	}
	for _, f := range []string{memFile, diskFile} {
		if err := w.cfg.Storage.Clone(ctx, filepath.Join(t.snap, f), filepath.Join(dir, f)); err != nil {
			return nil, fmt.Errorf("copy snapshot %s: %w", f, err)
		}
	}
	ns, nic, err := w.poolNet(ctx, filepath.Base(dir))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && ns != nil {
			_ = w.cfg.Network.Release(context.WithoutCancel(ctx), ns)
		}
	}()
	vm, err := w.cfg.Driver.(vmm.IncomingStarter).StartIncoming(ctx, vmm.BootSpec{
		ID: "pool-" + filepath.Base(dir), StateDir: filepath.Join(dir, vmDir),
		Kernel: w.cfg.Kernel, Initrd: w.cfg.Initrd, Disks: []vmm.Disk{{Path: filepath.Join(dir, diskFile)}},
		VCPUs: t.m.VCPUs, MemoryMiB: t.m.MemoryMiB, MemoryFile: filepath.Join(dir, memFile), Network: nic,
		FreePageReporting: freePageReporting(set),
	})
	if err != nil {
		return nil, fmt.Errorf("start pool vm: %w", err)
	}
	iv, ok := vm.(vmm.IncomingVM)
	if !ok {
		_ = vm.Stop(ctx)
		return nil, fmt.Errorf("pool vm cannot be restored: %w", errdefs.ErrInternal)
	}
	if err := iv.Incoming(ctx, t.snap); err != nil { // stops vm on error
		return nil, fmt.Errorf("restore pool vm: %w", err)
	}
	e := &poolEntry{dir: dir, vm: vm, memMiB: t.m.MemoryMiB, dial: &dialSwitch{f: vm.DialAgent}, netns: ns}
	e.client = agentclient.New(e.dial.dial, w.log.With("pool", filepath.Base(dir)))
	if err := w.warmPoolEntry(ctx, e); err != nil {
		e.client.Close()
		_ = vm.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return e, nil
}

// poolWarmup is the id of the process a pooled VM runs once. The API's
// command ids never take this form; the agent keeps it among its exited
// processes, which only the worker lists.
const poolWarmup = "space-pool-warmup"

// warmPoolEntry resumes the pooled VM, brings up the agent link and runs
// one short command. A VMM restored in a new process starts with nothing
// translated (TCG) and nothing of the memory file paged in: the first
// command after a restore costs several times the next one, and this pays
// that off the request path. The VM then idles, running, until taken;
// configure at the take gives it the sandbox's identity, fresh entropy and
// the clock, as after any restore.
func (w *Worker) warmPoolEntry(ctx context.Context, e *poolEntry) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.BootTimeout)
	defer cancel()
	if err := e.vm.(vmm.Pauser).Resume(ctx); err != nil {
		return fmt.Errorf("resume pool vm: %w", err)
	}
	if _, err := e.client.Start(ctx, agentproto.ProcessSpec{ID: poolWarmup, Argv: []string{"true"}}); err != nil {
		return fmt.Errorf("warm pool vm: %w", err)
	}
	st, err := e.client.Events(ctx, poolWarmup, 0)
	if err != nil {
		return fmt.Errorf("warm pool vm: %w", err)
	}
	defer st.Close()
	for {
		ev, err := st.Next()
		if err != nil {
			return fmt.Errorf("warm pool vm: %w", err)
		}
		if ev.Type == agentproto.EventExit {
			return nil
		}
	}
}

// takePooled returns a pooled VM of snap for sb with its network (when the
// worker has networking) already sb's, or nil: then sb has no network yet.
// A pooled VM whose namespace cannot become sb's is discarded.
func (w *Worker) takePooled(ctx context.Context, sb *sandbox, snap string, m manifest) *poolEntry {
	w.pool.want(snap, m)
	if err := w.checkPolicy(sb.spec); err != nil {
		return nil // netUp refuses it; no pooled VM is spent on it
	}
	e := w.pool.take(snap)
	if e == nil {
		return nil
	}
	if err := w.netUpPooled(ctx, sb, e); err != nil {
		w.log.Warn("pooled vm network unusable: restoring instead", "sandbox", sb.spec.ID, "err", err)
		w.pool.Discard(e)
		return nil
	}
	return e
}

// restoreTemplate starts sb's VM from the template snapshot snap: the
// pooled VM e (from takePooled) when there is one, else a restore on the
// request path. It returns how.
func (w *Worker) restoreTemplate(ctx context.Context, sb *sandbox, snap string, m manifest, e *poolEntry, ph *phases) (string, error) {
	if e != nil {
		err := w.adoptPoolEntry(sb, e, m)
		if err != nil {
			w.log.Warn("pooled vm unusable: restoring instead", "sandbox", sb.spec.ID, "err", err)
			w.pool.Discard(e)
			_ = os.Remove(sb.path(memFile))
			_ = os.Remove(sb.path(diskFile))
			_ = os.MkdirAll(sb.path(vmDir), 0o700)
			return "template snapshot", w.restoreWith(ctx, sb, snap, m, restoreOpts{ph: ph})
		}
		// The pooled VM runs and its link is up: the sandbox takes both.
		e.dial.set(sb.dialAgent)
		w.countPorts(e.client, sb.spec.ID)
		sb.mu.Lock()
		old := sb.agent
		sb.agent = e.client
		sb.mu.Unlock()
		old.Close()
		w.setVM(sb, e.vm, true)
		ph.mark("take")
		return "pool", nil
	}
	return "template snapshot", w.restoreWith(ctx, sb, snap, m, restoreOpts{ph: ph})
}

// adoptPoolEntry moves e's files and state dir into sb's dir (an empty vm
// dir there is replaced) and tells the VM.
func (w *Worker) adoptPoolEntry(sb *sandbox, e *poolEntry, m manifest) error {
	// os.Rename refuses an existing directory as the target, even empty.
	if err := os.Remove(sb.path(vmDir)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("replace vm dir: %w: %v", errdefs.ErrInternal, err)
	}
	for _, f := range []string{memFile, diskFile, vmDir} {
		if err := os.Rename(filepath.Join(e.dir, f), sb.path(f)); err != nil {
			return fmt.Errorf("move pooled %s: %w: %v", f, errdefs.ErrInternal, err)
		}
	}
	_ = os.Remove(e.dir)
	// From here e's VM is recorded under sb's dir; a caller that discards e
	// stops it, which removes the record too.
	spec, err := w.restoreSpec(sb, m)
	if err != nil {
		return err
	}
	return e.vm.(vmm.IncomingVM).Relocate(spec)
}

// PoolStats counts the pooled VMs: Ready to be taken now, Made and Taken
// since the worker started.
type PoolStats = prestart.Stats

// PoolStats reports the pools (zero when pools do not apply).
func (w *Worker) PoolStats() PoolStats { return w.pool.Stats() }

// lockPoolTarget holds the lock of the build whose snapshot t is (a
// snapshot that names no build was pruned at start), unless a forget of
// that build holds it or waits for it.
func (w *Worker) lockPoolTarget(t poolTarget) (unlock func(), ok bool) {
	name, digest, _ := template.ParseRef(t.m.Template)
	return w.tplLocks.TryRead(name, digest)
}
