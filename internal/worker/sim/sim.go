// Package sim is a simulated worker: it keeps the worker contract
// (internal/worker) in memory, with no VMs, for capacity planning of the
// control plane, the store and placement. Each verb takes a latency drawn
// from a configurable distribution and fails at a configurable rate
// (Profile, seeded, so a run repeats); each sandbox's guest is in memory
// too: files within a size bound, and processes that run a small built-in
// command set (echo, true, false, sleep, cat, pwd, exit) with events,
// exit codes and stdin.
//
// It is a supported mode (`spaced --simulate`, `spaced worker --simulate`),
// never a stand-in for a real host: it says so in its Simulated method,
// which the API shows in GET /v1/admin/workers, and in its node's label.
// What it cannot simulate it refuses or says (docs/simulate.md): no
// network (policies are kept, the egress log is empty), no object store,
// and its sandboxes live only as long as its process.
//
// It must not touch the host: no files, processes, VMs or network.
package sim

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/egress"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
)

// Config configures a simulated worker.
type Config struct {
	Profile Profile
	Logger  *slog.Logger
}

// Worker is the simulated worker.
type Worker struct {
	profile Profile
	dice    *dice
	log     *slog.Logger
	exits   chan worker.Exit

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	ckpts     map[string]*checkpoint
	closed    bool
}

// sandbox is one simulated VM. op serialises the calls that change it
// (create, delete and the lifecycle verbs, held across their latency);
// mu guards the fields.
type sandbox struct {
	op sync.Mutex

	mu       sync.Mutex
	spec     worker.SandboxSpec
	state    worker.VMState
	creating bool
	booted   time.Time
	restored bool
	guest    *guestState // frozen while suspended
	gone     chan struct{}
}

type checkpoint struct {
	status worker.CheckpointStatus
	guest  *guestState // frozen
}

var (
	_ worker.Worker    = (*Worker)(nil)
	_ worker.Simulator = (*Worker)(nil)
)

// New returns a simulated worker with no sandboxes.
func New(cfg Config) *Worker {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Profile.Timings == nil {
		cfg.Profile.Timings = map[Verb]Timing{}
	}
	if cfg.Profile.GuestDiskMiB <= 0 {
		cfg.Profile.GuestDiskMiB = DefaultGuestDiskMiB
	}
	return &Worker{profile: cfg.Profile, dice: newDice(cfg.Profile.Seed), log: cfg.Logger,
		exits: make(chan worker.Exit), sandboxes: map[string]*sandbox{}, ckpts: map[string]*checkpoint{}}
}

// Simulated implements worker.Simulator: always true.
func (w *Worker) Simulated() bool { return true }

// spend waits the latency of verb and says whether the call fails.
func (w *Worker) spend(ctx context.Context, verb Verb) error {
	lat, fail := w.dice.draw(w.profile.Timings[verb])
	if lat > 0 {
		t := time.NewTimer(lat)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctxError(ctx, verb)
		}
	}
	if fail {
		return errdefs.New(errdefs.ErrInternal, "simulated failure of %s (failure rate %g)", verb, w.profile.Timings[verb].FailureRate)
	}
	return nil
}

// ctxError is the error of a call whose context ended: a deadline is
// deadline_exceeded, a cancel cancelled, wrapping the context's error.
func ctxError(ctx context.Context, verb Verb) error {
	c := errdefs.ErrCancelled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		c = errdefs.ErrDeadlineExceeded
	}
	return errdefs.New(c, "%s did not end in time", verb).WithCause(ctx.Err())
}

func (w *Worker) Ready(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errdefs.New(errdefs.ErrUnavailable, "the simulated worker is closed")
	}
	return nil
}

func (w *Worker) CreateSandbox(ctx context.Context, spec worker.SandboxSpec) (worker.SandboxStatus, error) {
	switch {
	case spec.ID == "":
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrInvalidArgument, "sandbox id is empty")
	case spec.FromSnapshot != "":
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrFailedPrecondition, "the simulated worker keeps no object store to wake %s from", spec.FromSnapshot)
	case spec.Template == "" && spec.FromCheckpoint == "":
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrInvalidArgument, "no template")
	}
	if len(spec.Network) > 0 {
		if _, err := egress.ParsePolicy(spec.Network); err != nil {
			return worker.SandboxStatus{}, err
		}
	}
	sb := &sandbox{spec: spec, creating: true, gone: make(chan struct{})}
	sb.op.Lock()
	defer sb.op.Unlock()
	var from *checkpoint
	w.mu.Lock()
	err := func() error {
		if w.closed {
			return errdefs.New(errdefs.ErrUnavailable, "the simulated worker is closed")
		}
		if _, dup := w.sandboxes[spec.ID]; dup {
			return errdefs.New(errdefs.ErrConflict, "sandbox %s exists", spec.ID)
		}
		if spec.FromCheckpoint != "" {
			if from = w.ckpts[spec.FromCheckpoint]; from == nil {
				return errdefs.New(errdefs.ErrNotFound, "checkpoint %s not found", spec.FromCheckpoint)
			}
		}
		w.sandboxes[spec.ID] = sb
		return nil
	}()
	w.mu.Unlock()
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	if err := w.spend(ctx, VerbCreate); err != nil {
		w.forget(spec.ID, sb)
		return worker.SandboxStatus{}, err
	}
	sb.mu.Lock()
	if from != nil {
		c := from.status.Spec
		sb.spec.Template, sb.spec.VCPUs, sb.spec.MemoryMiB, sb.spec.DiskMiB = c.Template, c.VCPUs, c.MemoryMiB, c.DiskMiB
		sb.guest, sb.restored = from.guest.clone(false), true
	} else {
		disk := int64(spec.DiskMiB)
		if disk <= 0 {
			disk = int64(w.profile.GuestDiskMiB)
		}
		sb.guest = newGuestState(disk << 20)
	}
	sb.state, sb.creating, sb.booted = worker.VMRunning, false, time.Now()
	sb.mu.Unlock()
	return sb.status(), nil
}

// forget removes sandbox id from the map if it is still sb.
func (w *Worker) forget(id string, sb *sandbox) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sandboxes[id] == sb {
		delete(w.sandboxes, id)
	}
}

func (w *Worker) DeleteSandbox(ctx context.Context, id string) error {
	w.mu.Lock()
	sb := w.sandboxes[id]
	w.mu.Unlock()
	if sb == nil {
		return nil
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	sb.mu.Lock()
	gone := sb.creating // a create that failed meanwhile
	sb.mu.Unlock()
	if gone {
		return nil
	}
	if err := w.spend(ctx, VerbDelete); err != nil {
		return err
	}
	w.forget(id, sb)
	sb.mu.Lock()
	g := sb.guest
	sb.state = worker.VMStopped
	close(sb.gone)
	sb.mu.Unlock()
	g.stop()
	return nil
}

// lookup is a created sandbox, or ErrNotFound.
func (w *Worker) lookup(id string) (*sandbox, error) {
	w.mu.Lock()
	sb := w.sandboxes[id]
	w.mu.Unlock()
	if sb != nil {
		sb.mu.Lock()
		creating := sb.creating
		sb.mu.Unlock()
		if !creating {
			return sb, nil
		}
	}
	return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %s not found", id)
}

func (sb *sandbox) status() worker.SandboxStatus {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	st := worker.SandboxStatus{ID: sb.spec.ID, State: sb.state, BootedAt: sb.booted, Restored: sb.restored, Spec: sb.spec}
	if sb.guest != nil {
		st.DiskBytes = sb.guest.usedBytes()
		if sb.state == worker.VMSuspended {
			st.SnapshotBytes = st.DiskBytes + int64(sb.spec.MemoryMiB)<<20
		}
	}
	return st
}

func (w *Worker) Sandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	sb, err := w.lookup(id)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	return sb.status(), nil
}

func (w *Worker) Sandboxes(ctx context.Context) ([]worker.SandboxStatus, error) {
	w.mu.Lock()
	all := make([]*sandbox, 0, len(w.sandboxes))
	for _, sb := range w.sandboxes {
		all = append(all, sb)
	}
	w.mu.Unlock()
	out := make([]worker.SandboxStatus, 0, len(all))
	for _, sb := range all {
		if st := sb.status(); st.State != "" { // "" while creating
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (w *Worker) Agent(ctx context.Context, id string) (worker.Guest, error) {
	if _, err := w.lookup(id); err != nil {
		return nil, err
	}
	return &guest{w: w, id: id}, nil
}

// guestOf is sandbox id's guest while its VM runs, and the channel closed
// when it is deleted.
func (w *Worker) guestOf(id string) (*guestState, <-chan struct{}, error) {
	sb, err := w.lookup(id)
	if err != nil {
		return nil, nil, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.state != worker.VMRunning {
		return nil, nil, errdefs.New(errdefs.ErrUnavailable, "sandbox is %s", sb.state)
	}
	return sb.guest, sb.gone, nil
}

func (w *Worker) SetNetworkPolicy(ctx context.Context, id string, policy json.RawMessage) error {
	if _, err := egress.ParsePolicy(policy); err != nil {
		return err
	}
	sb, err := w.lookup(id)
	if err != nil {
		return err
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	sb.mu.Lock()
	sb.spec.Network = append(json.RawMessage(nil), policy...)
	sb.mu.Unlock()
	return nil
}

// NetworkLog is empty: simulated guests make no connections.
func (w *Worker) NetworkLog(ctx context.Context, id string) ([]worker.NetworkRecord, error) {
	if _, err := w.lookup(id); err != nil {
		return nil, err
	}
	return []worker.NetworkRecord{}, nil
}

// Exits never delivers: simulated VMs do not crash.
func (w *Worker) Exits() <-chan worker.Exit { return w.exits }

// Close ends the simulation: unlike a real worker's, its sandboxes do not
// outlive it (they are in its memory).
func (w *Worker) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	for _, sb := range w.sandboxes {
		sb.mu.Lock()
		if sb.guest != nil {
			sb.guest.stop()
		}
		sb.mu.Unlock()
	}
	return nil
}
