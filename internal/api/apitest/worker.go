// Package apitest provides a worker.Worker for tests of the API and its
// clients: each sandbox is a real space-agent in test mode, in the test
// process, serving a temp dir as its filesystem. No VMs, no root needed.
package apitest

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agent"
	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/egress"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// Worker is a hand-made worker.Worker: instead of a VM each sandbox gets
// a real space-agent in test mode, in this process, serving a temp dir as
// its filesystem over a unix socket.
type Worker struct {
	t     testing.TB
	mu    sync.Mutex
	vms   map[string]*VM
	exits chan worker.Exit
	// CreateErr, when set, makes CreateSandbox fail.
	CreateErr error
	// Gate, when set, blocks CreateSandbox until closed.
	Gate chan struct{}
	// WrapGuest, when set, wraps the Guest Agent hands out (a test's
	// stalled or filtering guest around the real agent's client).
	WrapGuest func(id string, g worker.Guest) worker.Guest
	NotReady  error
	Deleted   []string
	// Forgotten are the template references ForgetTemplate got.
	Forgotten []string
	// LifecycleGate, when set, blocks every lifecycle call until closed.
	LifecycleGate chan struct{}
	// WakeErr, when set, makes WakeSandbox fail (the VM stays as it was).
	WakeErr error
	ckpts   map[string]*checkpoint
	closed  bool // the test ended (closeAll)
}

// VM is one fake sandbox.
type VM struct {
	ID   string
	Root string
	// Spec is what CreateSandbox got; Spec.Network follows SetNetworkPolicy.
	Spec worker.SandboxSpec
	// State is the worker.VM* state ("" is running).
	State worker.VMState
	// NetLog is what NetworkLog returns.
	NetLog []worker.NetworkRecord
	client *agentclient.Client
	cancel context.CancelFunc
}

// NewWorker returns a fake worker; its agents and files end with the test.
func NewWorker(t testing.TB) *Worker {
	w := &Worker{t: t, vms: map[string]*VM{}, ckpts: map[string]*checkpoint{}, exits: make(chan worker.Exit, 8)}
	// One cleanup for everything, registered now: a fuzz target's F may
	// not take cleanups while its fuzz function (which creates VMs) runs.
	t.Cleanup(w.closeAll)
	return w
}

// closeAll ends the VMs and removes the checkpoints that are left.
func (w *Worker) closeAll() {
	w.mu.Lock()
	vms, ckpts := w.vms, w.ckpts
	w.vms, w.ckpts = map[string]*VM{}, map[string]*checkpoint{}
	w.closed = true // an operation still running makes nothing more
	w.mu.Unlock()
	for _, vm := range vms {
		vm.cancel()
	}
	for _, ck := range ckpts {
		os.RemoveAll(filepath.Dir(ck.root))
	}
}

func (w *Worker) Ready(ctx context.Context) error { return w.NotReady }

func (w *Worker) CreateSandbox(ctx context.Context, spec worker.SandboxSpec) (worker.SandboxStatus, error) {
	w.mu.Lock()
	gate, cerr := w.Gate, w.CreateErr
	_, dup := w.vms[spec.ID]
	w.mu.Unlock()
	if dup {
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrConflict, "sandbox %s exists", spec.ID)
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return worker.SandboxStatus{}, ctx.Err()
		}
	}
	if cerr != nil {
		return worker.SandboxStatus{}, cerr
	}
	dir, err := os.MkdirTemp("", "space-api-vm-")
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	root := filepath.Join(dir, "root")
	os.Mkdir(root, 0o755)
	var inherited []agentproto.ProcessInfo
	if spec.FromCheckpoint != "" {
		if inherited, err = w.branchRoot(&spec, root); err != nil {
			os.RemoveAll(dir)
			return worker.SandboxStatus{}, err
		}
	}
	actx, cancel := context.WithCancel(context.Background())
	ag := agent.New(agent.Config{FileRoot: root})
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		cancel()
		return worker.SandboxStatus{}, err
	}
	go ag.ServeListener(actx, ln)
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}, nil)
	// Stand-ins of inherited processes end with the fake VM (a real
	// VM's processes end with it; the fake's agent leaves them running).
	standIns, ierr := inheritProcesses(ctx, c, inherited)
	vm := &VM{ID: spec.ID, Root: root, Spec: spec, client: c, cancel: func() {
		kctx, kcancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, id := range standIns {
			_ = c.Signal(kctx, id, "SIGKILL") // gone already is fine
		}
		kcancel()
		c.Close()
		cancel()
		os.RemoveAll(dir)
	}}
	if ierr != nil {
		vm.cancel()
		return worker.SandboxStatus{}, ierr
	}
	w.mu.Lock()
	closed := w.closed
	_, dup = w.vms[spec.ID]
	if !closed && !dup {
		w.vms[spec.ID] = vm
	}
	w.mu.Unlock()
	if closed || dup {
		vm.cancel()
		if dup {
			return worker.SandboxStatus{}, errdefs.New(errdefs.ErrConflict, "sandbox %s exists", spec.ID)
		}
		return worker.SandboxStatus{}, errdefs.New(errdefs.ErrUnavailable, "the worker is closed")
	}
	st := vm.status()
	st.BootedAt = time.Now()
	return st, nil
}

func (w *Worker) DeleteSandbox(ctx context.Context, id string) error {
	w.mu.Lock()
	vm := w.vms[id]
	delete(w.vms, id)
	w.Deleted = append(w.Deleted, id)
	w.mu.Unlock()
	if vm != nil {
		vm.cancel()
	}
	return nil
}

func (w *Worker) Sandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	vm, ok := w.vms[id]
	if !ok {
		return worker.SandboxStatus{}, errdefs.ErrNotFound
	}
	return vm.status(), nil
}

func (w *Worker) Sandboxes(ctx context.Context) ([]worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []worker.SandboxStatus
	for _, vm := range w.vms {
		out = append(out, vm.status())
	}
	return out, nil
}

func (w *Worker) Agent(ctx context.Context, id string) (worker.Guest, error) {
	w.mu.Lock()
	vm, ok := w.vms[id]
	wrap := w.WrapGuest
	w.mu.Unlock()
	if !ok {
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %s is not on this worker", id)
	}
	if wrap != nil {
		return wrap(id, vm.client), nil
	}
	return vm.client, nil
}

// SetNetworkPolicy validates the policy as the real worker does and keeps it
// in the VM's Spec.
func (w *Worker) SetNetworkPolicy(ctx context.Context, id string, policy json.RawMessage) error {
	if _, err := egress.ParsePolicy(policy); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	vm, ok := w.vms[id]
	if !ok {
		return errdefs.New(errdefs.ErrNotFound, "sandbox %s is not on this worker", id)
	}
	vm.Spec.Network = append(json.RawMessage(nil), policy...)
	return nil
}

// NetworkLog returns the VM's NetLog.
func (w *Worker) NetworkLog(ctx context.Context, id string) ([]worker.NetworkRecord, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	vm, ok := w.vms[id]
	if !ok {
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %s is not on this worker", id)
	}
	return append([]worker.NetworkRecord{}, vm.NetLog...), nil
}

func (w *Worker) Exits() <-chan worker.Exit { return w.exits }
func (w *Worker) Close() error              { return nil }

var _ worker.Worker = (*Worker)(nil)

// Exit reports that sandbox id's VM stopped on its own.
func (w *Worker) Exit(id string, err error) { w.exits <- worker.Exit{SandboxID: id, Err: err} }

// Lose reports the sandbox's VM gone with the tenant-safe words a cluster's
// placement gives (worker.Exit.Lost), e.g. for a worker that died.
func (w *Worker) Lose(id string, err error, why string) {
	w.exits <- worker.Exit{SandboxID: id, Err: err, Lost: why}
}

// VM returns the fake VM of a sandbox (nil when there is none).
func (w *Worker) VM(id string) *VM {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.vms[id]
}

// RegisterBaseTemplate records a ready "base" template in st, as spaced does
// at start-up, so sandboxes can name it.
func RegisterBaseTemplate(t testing.TB, st store.Store) {
	t.Helper()
	err := st.UpsertTemplate(context.Background(), &store.Template{
		ID: store.NewID("tpl"), Name: "base", Digest: "sha256:" + strings.Repeat("0", 64),
		State: store.TemplateReady, Defaults: []byte(`{"vcpus":1,"memory_mib":256}`), CreatedAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
}
