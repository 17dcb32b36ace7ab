// Package local is the single-host Worker: it keeps each sandbox's files under
// the storage root, starts its microVM with a vmm.Driver, and hands out agent
// clients. Guest RAM lives in a memory file next to the disk, so a snapshot
// is the device state plus reflinks of those two files: templates get a
// ready snapshot that creates restore from, and sandboxes pause, suspend
// (durably, checksummed), wake, checkpoint, branch and restore. After a crash
// of the process that ran it, a new Worker adopts the VMs that still run
// (the driver records them on disk), knows the suspended sandboxes from their
// files, and reports the ones that died.
//
// Layout under the storage root, all owned by this package:
//
//	sandboxes/<id>/sandbox.json, rootfs.ext4, memory, vm/   a sandbox
//	sandboxes/<id>/suspend/                                 its suspend snapshot
//	checkpoints/<id>/                                       a checkpoint (snapshot + checkpoint.json)
//	snapshots/templates/<key>/                              a template's ready snapshot
//
// A snapshot dir holds the driver's device state, memory, rootfs.ext4 and
// manifest.json (sha256 of every file), written last. It never touches
// templates (read-only to it), the store or anything of the API.
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/budget"
	"github.com/space-sandbox/space/internal/egress"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/keylock"
	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/storage"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local/readysnap"
	"github.com/space-sandbox/space/internal/worker/local/tpllock"
)

// Config wires a Worker.
type Config struct {
	// Storage is the reflink-capable data root; sandboxes live under
	// Storage.Root()/sandboxes.
	Storage *storage.Store
	// Driver boots the VMs.
	Driver vmm.Driver
	// Kernel and Initrd are the guest boot artifacts.
	Kernel string
	Initrd string
	// TemplatesDir holds template images (internal/template layout).
	TemplatesDir string
	// BootTimeout bounds boot to agent ready. Default 2 minutes (TCG on a
	// loaded host is slow; KVM boots in well under a second).
	BootTimeout time.Duration
	// DisableSnapshots makes every create a cold boot (no ready snapshots
	// of templates), for comparison and for VMMs that cannot restore.
	DisableSnapshots bool
	// ObserveBoot, if set, receives every successful create's duration.
	ObserveBoot func(time.Duration)
	// ObserveLinkAbuse, if set, is called each time a sandbox's agent link
	// is dropped because its guest broke the link's bounds.
	ObserveLinkAbuse func()
	// PortConnections, if set, counts every sandbox's port connections
	// (Guest.DialPort) under its id, with metrics; its limit should be
	// agentclient.MaxPortConnections. Without it each sandbox's agent
	// client counts its own, with that limit.
	PortConnections *budget.Set
	Logger          *slog.Logger
	// Network and Egress, when both set, give every sandbox its own network
	// namespace, a NIC and the egress path of its policy (network.go);
	// without them sandboxes have no NIC and policies are refused.
	Network *network.Manager
	Egress  *egress.Service
	// Secrets resolves ${secret:NAME} references of policies at request time.
	Secrets SecretLookup
	// SandboxSecrets, when set, resolves them instead by sandbox id: a
	// cluster worker asks the control plane, which knows whose sandbox it
	// is (the scope a Pod carries is not trusted for that).
	SandboxSecrets SandboxSecretLookup
	// PoolSize is how many restored, paused VMs the worker keeps per
	// template snapshot in use, to take on create (pool.go). Zero means
	// DefaultPoolSize; negative disables pools.
	PoolSize int
	// PoolMemoryMiB bounds the guest memory of all pooled VMs together.
	// Zero means DefaultPoolMemoryMiB.
	PoolMemoryMiB int
	// WakePoolSize is how many VMMs the worker starts ahead per shape of
	// recent suspends, for wakes to take (wake_pool.go). Zero means
	// DefaultWakePoolSize; negative disables them.
	WakePoolSize int
	// WakePoolMemoryMiB bounds the guest memory of all those VMMs together.
	// Zero means DefaultWakePoolMemoryMiB.
	WakePoolMemoryMiB int
	// Snapshots, when set, is the object store suspends upload to and
	// creates with SandboxSpec.FromSnapshot download from (cluster mode:
	// suspend here, wake on any worker). Its download cache must be on
	// Storage's volume. Nil keeps suspend snapshots on this worker only.
	Snapshots SnapshotStore
}

// Worker is the single-host worker.Worker.
type Worker struct {
	cfg   Config
	log   *slog.Logger
	root  string // <storage root>/sandboxes
	exits chan worker.Exit

	ready readysnap.Cache
	pool  vmPool   // its Pool nil when pools do not apply
	wakes wakePool // its Pool nil when wake slots do not apply
	// ckMu: branches and restores read checkpoints (RLock) while
	// DeleteCheckpoint removes them (Lock).
	ckMu sync.RWMutex
	// tplLocks: creates and pool fills make and read a template build's
	// ready snapshots (shared) while ForgetTemplate removes them
	// (exclusive), one lock per build (tpllock.go).
	tplLocks tpllock.Locks
	// imageFetches: one fetch of a template image at a time per digest
	// (template_fetch.go).
	imageFetches keylock.Map

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	closed    chan struct{}
	closeOnce sync.Once
}

var (
	_ worker.Worker    = (*Worker)(nil)
	_ worker.Lifecycle = (*Worker)(nil)
)

// New opens the worker and adopts the sandboxes a previous process left.
func New(ctx context.Context, cfg Config) (*Worker, error) {
	if cfg.Storage == nil || cfg.Driver == nil {
		return nil, fmt.Errorf("local worker: storage and driver are required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.BootTimeout <= 0 {
		cfg.BootTimeout = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Worker{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "worker"),
		root:      filepath.Join(cfg.Storage.Root(), "sandboxes"),
		exits:     make(chan worker.Exit, 64),
		sandboxes: map[string]*sandbox{},
		closed:    make(chan struct{}),
	}
	if err := os.MkdirAll(w.root, 0o700); err != nil {
		return nil, fmt.Errorf("local worker: create %s: %w", w.root, err)
	}
	if err := w.adoptAll(ctx); err != nil {
		return nil, err
	}
	// Namespaces first: the pool's filler makes new ones (for this
	// process's pooled VMs) that no sandbox owns.
	w.reapNamespaces(ctx)
	w.pruneTemplateSnapshots()
	w.startPool(ctx)
	w.startWakePool(ctx)
	return w, nil
}

// Ready reports what is missing for starting VMs.
func (w *Worker) Ready(ctx context.Context) error {
	var missing []error
	for what, path := range map[string]string{"guest kernel": w.cfg.Kernel, "guest initramfs": w.cfg.Initrd} {
		if _, err := os.Stat(path); err != nil {
			missing = append(missing, fmt.Errorf("%s missing (run `make setup`)", what))
		}
	}
	if _, err := os.Stat(w.cfg.TemplatesDir); err != nil {
		missing = append(missing, fmt.Errorf("templates dir missing"))
	}
	select {
	case <-w.closed:
		missing = append(missing, errors.New("worker closed"))
	default:
	}
	if len(missing) > 0 {
		return fmt.Errorf("worker not ready: %w: %w", errors.Join(missing...), errdefs.ErrUnavailable)
	}
	return nil
}

// Exits delivers the VMs that stopped on their own.
func (w *Worker) Exits() <-chan worker.Exit { return w.exits }

// Close stops watching VMs and closes agent clients. Sandbox VMs keep
// running for the next process to adopt; pooled VMs are stopped.
func (w *Worker) Close() error {
	w.closeOnce.Do(func() {
		close(w.closed)
		w.pool.Close()
		w.wakes.Close()
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, sb := range w.sandboxes {
			sb.release()
		}
	})
	return nil
}

func (w *Worker) dir(id string) string { return filepath.Join(w.root, id) }

// lookup returns the sandbox or ErrNotFound.
func (w *Worker) lookup(id string) (*sandbox, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sb, ok := w.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return sb, nil
}

// Sandbox reports one sandbox.
func (w *Worker) Sandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	sb, err := w.lookup(id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return sb.status(), nil
}

// Sandboxes lists every sandbox this worker holds files or a VM for.
func (w *Worker) Sandboxes(ctx context.Context) ([]worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]worker.SandboxStatus, 0, len(w.sandboxes))
	for _, sb := range w.sandboxes {
		out = append(out, sb.status())
	}
	return out, nil
}

// Agent returns the sandbox's agent client.
func (w *Worker) Agent(ctx context.Context, id string) (worker.Guest, error) {
	sb, err := w.lookup(id)
	if err != nil {
		return nil, err
	}
	c, err := sb.agentClient()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// The agent's client is the local form of a guest.
var _ worker.Guest = (*agentclient.Client)(nil)
