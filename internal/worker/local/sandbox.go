package local

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/worker"
)

// Files in a sandbox's directory.
const (
	diskFile = "rootfs.ext4"
	specFile = "sandbox.json"
	vmDir    = "vm"
)

// sandbox is one sandbox this worker holds. vm is nil when its VMM is gone
// (found dead at adoption); such a sandbox only waits to be deleted.
type sandbox struct {
	spec     worker.SandboxSpec
	bootedAt time.Time
	dir      string

	mu       sync.Mutex
	vm       vmm.VM
	agent    *agentclient.Client
	deleting bool
}

func (sb *sandbox) status() worker.SandboxStatus {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	st := worker.SandboxStatus{ID: sb.spec.ID, State: worker.VMStopped, BootedAt: sb.bootedAt}
	if sb.vm != nil {
		st.VMMPID = sb.vm.PID()
		select {
		case <-sb.vm.Done():
		default:
			st.State = worker.VMRunning
		}
	}
	st.DiskBytes = allocatedBytes(filepath.Join(sb.dir, diskFile))
	return st
}

func (sb *sandbox) agentClient() (*agentclient.Client, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.agent == nil || sb.deleting {
		return nil, errdefs.New(errdefs.ErrConflict, "sandbox %s is not running", sb.spec.ID)
	}
	return sb.agent, nil
}

// release lets go of the sandbox without stopping its VM, so the next worker
// process can adopt it.
func (sb *sandbox) release() {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.agent != nil {
		sb.agent.Close()
	}
	if d, ok := sb.vm.(vmm.Detacher); ok {
		_ = d.Detach() // the VM keeps running either way; adoption re-opens it
	}
}

// CreateSandbox clones the template disk, boots the VM and configures the
// agent. On any failure it undoes what it did.
func (w *Worker) CreateSandbox(ctx context.Context, spec worker.SandboxSpec) (_ worker.SandboxStatus, err error) {
	if spec.ID == "" || strings.ContainsAny(spec.ID, "/.") {
		return worker.SandboxStatus{}, fmt.Errorf("sandbox id %q: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	tpl, err := template.Load(w.cfg.TemplatesDir, spec.Template)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	diskBytes := tpl.SizeBytes
	if want := int64(spec.DiskMiB) << 20; want > diskBytes {
		diskBytes = want
	}
	sb := &sandbox{spec: spec, dir: w.dir(spec.ID)}
	w.mu.Lock()
	if _, dup := w.sandboxes[spec.ID]; dup {
		w.mu.Unlock()
		return worker.SandboxStatus{}, fmt.Errorf("sandbox %s exists: %w", spec.ID, errdefs.ErrConflict)
	}
	w.sandboxes[spec.ID] = sb
	w.mu.Unlock()
	defer func() {
		if err != nil {
			w.teardown(context.WithoutCancel(ctx), sb)
		}
	}()

	log := w.log.With("sandbox", spec.ID)
	started := time.Now()
	if err := os.MkdirAll(filepath.Join(sb.dir, vmDir), 0o700); err != nil {
		return worker.SandboxStatus{}, fmt.Errorf("sandbox dir: %w", err)
	}
	if err := writeJSON(filepath.Join(sb.dir, specFile), spec); err != nil {
		return worker.SandboxStatus{}, err
	}
	// A reflink clone allocates nothing up front, but the guest may fill its
	// disk: refuse when the volume could not hold a fair share of it.
	if err := w.cfg.Storage.EnsureFree(ctx, diskBytes/4); err != nil {
		return worker.SandboxStatus{}, err
	}
	disk := filepath.Join(sb.dir, diskFile)
	if err := w.cfg.Storage.CloneAndGrow(ctx, tpl.Image, disk, diskBytes); err != nil {
		return worker.SandboxStatus{}, fmt.Errorf("clone template disk: %w", err)
	}
	vm, err := w.cfg.Driver.Start(ctx, vmm.BootSpec{
		ID:        spec.ID,
		StateDir:  filepath.Join(sb.dir, vmDir),
		Kernel:    w.cfg.Kernel,
		Initrd:    w.cfg.Initrd,
		Disks:     []vmm.Disk{{Path: disk}},
		VCPUs:     spec.VCPUs,
		MemoryMiB: spec.MemoryMiB,
	})
	if err != nil {
		return worker.SandboxStatus{}, fmt.Errorf("start vm: %w", err)
	}
	client := agentclient.New(vm.DialAgent, log)
	sb.mu.Lock()
	sb.vm, sb.agent = vm, client
	sb.mu.Unlock()

	if err := w.waitAgent(ctx, vm, client); err != nil {
		return worker.SandboxStatus{}, err
	}
	if err := configure(ctx, client, spec); err != nil {
		return worker.SandboxStatus{}, fmt.Errorf("configure agent: %w", err)
	}
	sb.bootedAt = time.Now()
	boot := sb.bootedAt.Sub(started)
	if w.cfg.ObserveBoot != nil {
		w.cfg.ObserveBoot(boot)
	}
	log.Info("sandbox booted", "vmm_pid", vm.PID(), "boot", boot.Round(time.Millisecond))
	go w.watch(sb, vm)
	return sb.status(), nil
}

// waitAgent waits for the agent to answer, bounded by BootTimeout; a VMM
// that dies first ends the wait at once. The console tail goes into the
// internal cause, never into the public message.
func (w *Worker) waitAgent(ctx context.Context, vm vmm.VM, client *agentclient.Client) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.BootTimeout)
	defer cancel()
	go func() {
		select {
		case <-vm.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	_, err := client.WaitReady(ctx)
	if err == nil {
		return nil
	}
	tail := strings.Join(vm.ConsoleTail(20), "\n")
	w.log.Error("guest did not become ready", "sandbox", vm.ID(), "err", err, "console", tail)
	return errdefs.New(errdefs.ErrUnavailable, "the sandbox's VM did not become ready").
		WithCause(fmt.Errorf("agent not ready: %v (vm err: %v); console:\n%s", err, vm.Err(), tail))
}

// configure hands the agent its identity with fresh entropy and the clock.
func configure(ctx context.Context, c *agentclient.Client, spec worker.SandboxSpec) error {
	seed := make([]byte, 64)
	if _, err := rand.Read(seed); err != nil {
		return err
	}
	host := hostname(spec)
	return c.Configure(ctx, agentproto.Configure{
		SandboxID: spec.ID, Hostname: host, Env: spec.Env, Entropy: seed, Now: time.Now().UTC(),
	})
}

// watch reports a VM that stops without being asked to.
func (w *Worker) watch(sb *sandbox, vm vmm.VM) {
	select {
	case <-vm.Done():
	case <-w.closed:
		return
	}
	sb.mu.Lock()
	deleting := sb.deleting
	sb.mu.Unlock()
	if deleting {
		return
	}
	tail := strings.Join(vm.ConsoleTail(20), "\n")
	w.log.Warn("sandbox VM exited", "sandbox", sb.spec.ID, "err", vm.Err(), "console", tail)
	select {
	case w.exits <- worker.Exit{SandboxID: sb.spec.ID, Err: fmt.Errorf("vmm exited: %v", vm.Err())}:
	case <-w.closed:
	}
}

// DeleteSandbox stops the VM and removes the sandbox's files. Deleting an
// unknown sandbox succeeds.
func (w *Worker) DeleteSandbox(ctx context.Context, id string) error {
	w.mu.Lock()
	sb, ok := w.sandboxes[id]
	w.mu.Unlock()
	if !ok {
		// Files of a sandbox this process never knew (a create that crashed
		// before registering) still go.
		if id == "" || strings.ContainsAny(id, "/.") {
			return fmt.Errorf("sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
		}
		return removeAll(w.dir(id))
	}
	return w.teardown(ctx, sb)
}

// teardown undoes CreateSandbox in reverse order; safe to run twice.
func (w *Worker) teardown(ctx context.Context, sb *sandbox) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	sb.mu.Lock()
	sb.deleting = true
	vm, agent := sb.vm, sb.agent
	sb.mu.Unlock()
	var errs []error
	if agent != nil {
		agent.Close()
	}
	if vm != nil {
		if err := vm.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop vm: %w", err))
		}
	}
	if err := removeAll(sb.dir); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		w.mu.Lock()
		if w.sandboxes[sb.spec.ID] == sb {
			delete(w.sandboxes, sb.spec.ID)
		}
		w.mu.Unlock()
	}
	return errors.Join(errs...)
}

// adoptAll finds the sandboxes a previous process left and adopts their VMs.
func (w *Worker) adoptAll(ctx context.Context) error {
	entries, err := os.ReadDir(w.root)
	if err != nil {
		return fmt.Errorf("local worker: read %s: %w", w.root, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		sb := &sandbox{dir: w.dir(e.Name())}
		if err := readJSON(filepath.Join(sb.dir, specFile), &sb.spec); err != nil || sb.spec.ID != e.Name() {
			w.log.Warn("removing unreadable sandbox dir", "dir", e.Name(), "err", err)
			_ = removeAll(sb.dir)
			continue
		}
		vm, err := w.cfg.Driver.Recover(ctx, filepath.Join(sb.dir, vmDir))
		switch {
		case err == nil:
			sb.vm = vm
			sb.agent = agentclient.New(vm.DialAgent, w.log.With("sandbox", sb.spec.ID))
			sb.bootedAt = time.Now()
			go w.watch(sb, vm)
			w.log.Info("adopted sandbox VM", "sandbox", sb.spec.ID, "vmm_pid", vm.PID())
		case errors.Is(err, errdefs.ErrNotFound):
			w.log.Warn("sandbox VM is gone", "sandbox", sb.spec.ID)
		default:
			return fmt.Errorf("local worker: recover %s: %w", sb.spec.ID, err)
		}
		w.mu.Lock()
		w.sandboxes[sb.spec.ID] = sb
		w.mu.Unlock()
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove sandbox files: %w", err)
	}
	return nil
}

// hostname is a valid host name (RFC 1123 label) for the sandbox: sandbox
// ids carry an underscore, which host names cannot.
func hostname(spec worker.SandboxSpec) string {
	h := spec.Hostname
	if h == "" {
		h = spec.ID
	}
	h = strings.ToLower(strings.ReplaceAll(h, "_", "-"))
	if len(h) > 63 {
		h = h[:63]
	}
	return strings.Trim(h, "-")
}
