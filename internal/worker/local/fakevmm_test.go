package local_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	guestagent "github.com/space-sandbox/space/internal/agent"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/worker/local"
)

// fakeDriver is a vmm.Driver without VMs, for the worker's own logic
// (locks, adoption) where no guest needs to run: a VM is an agent in test
// mode in this process, its link a pipe. Start and Recover run the hooks
// when set; Restore always fails (a ready snapshot is never made: the
// template VM's Start fails or blocks), so creates cold-boot.
type fakeDriver struct {
	start   func(ctx context.Context, spec vmm.BootSpec) error
	recover func(ctx context.Context, stateDir string) error
}

var _ vmm.Restorer = (*fakeDriver)(nil)

func (d *fakeDriver) Name() string { return "fake" }

func (d *fakeDriver) Start(ctx context.Context, spec vmm.BootSpec) (vmm.VM, error) {
	if d.start != nil {
		if err := d.start(ctx, spec); err != nil {
			return nil, err
		}
	}
	return newFakeVM(spec.ID), nil
}

func (d *fakeDriver) Recover(ctx context.Context, stateDir string) (vmm.VM, error) {
	if d.recover == nil {
		return nil, errdefs.ErrNotFound
	}
	if err := d.recover(ctx, stateDir); err != nil {
		return nil, err
	}
	return newFakeVM("recovered"), nil
}

func (d *fakeDriver) Restore(context.Context, vmm.BootSpec, string) (vmm.VM, error) {
	return nil, errors.New("fake driver: no restore")
}

type fakeVM struct {
	id     string
	agent  *guestagent.Agent
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	done   chan struct{}
}

func newFakeVM(id string) *fakeVM {
	ctx, cancel := context.WithCancel(context.Background())
	return &fakeVM{id: id, agent: guestagent.New(guestagent.Config{FileRoot: os.TempDir()}), ctx: ctx, cancel: cancel,
		done: make(chan struct{})}
}

func (v *fakeVM) ID() string { return v.id }
func (v *fakeVM) PID() int   { return 0 }

func (v *fakeVM) DialAgent(ctx context.Context) (net.Conn, error) {
	host, guest := net.Pipe()
	go func() {
		_ = v.agent.ServeConn(v.ctx, guest)
		guest.Close()
	}()
	return host, nil
}

func (v *fakeVM) Stop(context.Context) error {
	v.once.Do(func() {
		v.cancel()
		close(v.done)
	})
	return nil
}

func (v *fakeVM) Done() <-chan struct{}    { return v.done }
func (v *fakeVM) Err() error               { return nil }
func (v *fakeVM) ConsoleTail(int) []string { return nil }

// fakeEnv is a worker config over a test volume (with the base template)
// and a fake driver; no pools.
func fakeEnv(t *testing.T, d *fakeDriver) (local.Config, testenv.Volume) {
	t.Helper()
	testenv.RequireRoot(t, "the test volume is a loop-mounted btrfs image")
	agentBin := testenv.AgentBinary(t)
	vol := testenv.NewVolume(t, agentBin)
	return local.Config{Storage: vol.Storage, Driver: d, Kernel: "/nonexistent/vmlinuz", Initrd: "/nonexistent/initrd",
		TemplatesDir: vol.TemplatesDir, PoolSize: -1, WakePoolSize: -1,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}, vol
}

// blockedIn reports whether a goroutine whose stack has fn waits on a
// lock now.
func blockedIn(fn string) bool {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(g, fn) && (strings.Contains(header, "Lock") || strings.Contains(header, "semacquire")) {
			return true
		}
	}
	return false
}
