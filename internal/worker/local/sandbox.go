package local

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/faultinject"
	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// manifest is a snapshot's manifest (snapfile): what a restore needs.
type manifest = snapfile.Manifest

// Files in a sandbox's directory.
const (
	diskFile     = snapfile.DiskFile
	memFile      = snapfile.MemFile
	manifestFile = snapfile.ManifestFile
	specFile     = "sandbox.json"
	vmDir        = "vm"
	// suspendDir holds the sealed suspend snapshot; suspendTmp one being
	// written (removed when found at start-up).
	suspendDir = "suspend"
	suspendTmp = "suspend.tmp"
)

// sandbox is one sandbox this worker holds. vm is nil when no VMM runs:
// suspended (suspendDir sealed) or gone (found dead at adoption, waiting to
// be deleted).
type sandbox struct {
	spec worker.SandboxSpec
	dir  string
	// agent is the sandbox's one client; it dials whatever VM the sandbox
	// has at the moment, so it stays valid across suspend, wake and restore.
	agent *agentclient.Client

	// op serialises lifecycle calls (create, pause, suspend, wake,
	// checkpoint, restore, delete) on this sandbox.
	op sync.Mutex

	mu        sync.Mutex
	vm        vmm.VM
	paused    bool
	suspended bool
	restored  bool
	bootedAt  time.Time
	deleting  bool
	lost      string           // why a sandbox without a VM is gone (public wording)
	netns     *network.Sandbox // its network namespace (network.go); nil without networking
	devices   int              // the device set of its VM (devices.go); under op
}

func (w *Worker) newSandbox(spec worker.SandboxSpec, dir string) *sandbox {
	sb := &sandbox{spec: spec, dir: dir}
	sb.agent = agentclient.New(sb.dialAgent, w.log.With("sandbox", spec.ID))
	sb.agent.OnLinkAbuse(w.cfg.ObserveLinkAbuse)
	w.countPorts(sb.agent, spec.ID)
	return sb
}

// countPorts has c count its port connections in the worker's budget, if
// it has one.
func (w *Worker) countPorts(c *agentclient.Client, sandboxID string) {
	if w.cfg.PortConnections != nil {
		c.SetPortBudget(w.cfg.PortConnections, sandboxID)
	}
}

func (sb *sandbox) dialAgent(ctx context.Context) (net.Conn, error) {
	sb.mu.Lock()
	vm, suspended := sb.vm, sb.suspended
	sb.mu.Unlock()
	if vm == nil {
		if suspended {
			return nil, errdefs.New(errdefs.ErrUnavailable, "sandbox %s is suspended", sb.spec.ID)
		}
		return nil, errdefs.New(errdefs.ErrUnavailable, "sandbox %s has no running VM", sb.spec.ID)
	}
	return vm.DialAgent(ctx)
}

func (sb *sandbox) path(name string) string { return filepath.Join(sb.dir, name) }

// stateLocked is the VM state; sb.mu held.
func (sb *sandbox) stateLocked() worker.VMState {
	switch {
	case sb.vm != nil:
		select {
		case <-sb.vm.Done():
			return worker.VMStopped
		default:
		}
		if sb.paused {
			return worker.VMPaused
		}
		return worker.VMRunning
	case sb.suspended:
		return worker.VMSuspended
	}
	return worker.VMStopped
}

func (sb *sandbox) state() worker.VMState {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.stateLocked()
}

func (sb *sandbox) status() worker.SandboxStatus {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	st := worker.SandboxStatus{ID: sb.spec.ID, State: sb.stateLocked(), BootedAt: sb.bootedAt,
		Restored: sb.restored, Spec: sb.spec}
	if st.State == worker.VMStopped {
		st.Lost = sb.lost
	}
	if sb.vm != nil {
		st.VMMPID = sb.vm.PID()
	}
	st.DiskBytes = snapfile.AllocatedBytes(sb.path(diskFile))
	st.MemoryBytes = snapfile.AllocatedBytes(sb.path(memFile))
	if sb.suspended {
		// The live files are gone while suspended: the snapshot holds them.
		st.SnapshotBytes = snapfile.DirBytes(sb.path(suspendDir))
		st.DiskBytes = snapfile.AllocatedBytes(filepath.Join(sb.dir, suspendDir, diskFile))
		st.MemoryBytes = snapfile.AllocatedBytes(filepath.Join(sb.dir, suspendDir, memFile))
	}
	return st
}

func (sb *sandbox) agentClient() (*agentclient.Client, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.deleting {
		return nil, errdefs.New(errdefs.ErrConflict, "sandbox %s is being deleted", sb.spec.ID)
	}
	if sb.vm == nil && !sb.suspended {
		return nil, errdefs.New(errdefs.ErrConflict, "sandbox %s is not running", sb.spec.ID)
	}
	return sb.agent, nil
}

// release lets go of the sandbox without stopping its VM, so the next worker
// process can adopt it.
func (sb *sandbox) release() {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.agent.Close()
	if d, ok := sb.vm.(vmm.Detacher); ok {
		_ = d.Detach() // the VM keeps running either way; adoption re-opens it
	}
}

// setVM installs a freshly started or restored VM and watches it.
func (w *Worker) setVM(sb *sandbox, vm vmm.VM, restored bool) {
	sb.mu.Lock()
	sb.vm, sb.paused, sb.suspended, sb.restored = vm, false, false, restored
	sb.bootedAt = time.Now()
	sb.mu.Unlock()
	go w.watch(sb, vm)
}

// bootSpec is the VM of sandbox sb with the given size.
func (w *Worker) bootSpec(sb *sandbox, vcpus, memMiB int) vmm.BootSpec {
	return vmm.BootSpec{
		ID:         sb.spec.ID,
		StateDir:   sb.path(vmDir),
		Kernel:     w.cfg.Kernel,
		Initrd:     w.cfg.Initrd,
		Disks:      []vmm.Disk{{Path: sb.path(diskFile)}},
		VCPUs:      vcpus,
		MemoryMiB:  memMiB,
		MemoryFile: sb.path(memFile),
		Network:    w.nic(sb),

		FreePageReporting: freePageReporting(sb.devices),
	}
}

// restoreSpec is the boot spec of sb's VM restored from a snapshot with
// manifest m: its size and device set (devices.go).
func (w *Worker) restoreSpec(sb *sandbox, m manifest) (vmm.BootSpec, error) {
	set, err := deviceSetOf(m)
	if err != nil {
		return vmm.BootSpec{}, err
	}
	if err := sb.useDeviceSet(set); err != nil {
		return vmm.BootSpec{}, err
	}
	return w.bootSpec(sb, m.VCPUs, m.MemoryMiB), nil
}

// CreateSandbox makes the sandbox's files and VM: a branch of a checkpoint
// (spec.FromCheckpoint), a restore of the template's ready snapshot, or, when
// no snapshot can be had, a cold boot. On any failure it undoes what it did.
func (w *Worker) CreateSandbox(ctx context.Context, spec worker.SandboxSpec) (_ worker.SandboxStatus, err error) {
	if !validID(spec.ID) {
		return worker.SandboxStatus{}, fmt.Errorf("sandbox id %q: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	if spec.FromSnapshot != "" {
		return w.createFromSnapshot(ctx, spec) // wake_snapshot.go
	}
	var ck *checkpointSource
	if spec.FromCheckpoint != "" {
		src, err := w.openCheckpoint(ctx, spec.FromCheckpoint) // checkpoint_objects.go
		if err != nil {
			return worker.SandboxStatus{}, err
		}
		defer src.release()
		ck = &src
		m := src.meta
		spec.Template, spec.VCPUs, spec.MemoryMiB, spec.DiskMiB =
			m.Spec.Template, m.Spec.VCPUs, m.Spec.MemoryMiB, m.Spec.DiskMiB
	}
	spec = w.withNetwork(spec)
	sb, done, err := w.register(ctx, spec)
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	defer func() { done(err) }()

	started := time.Now()
	ph := startPhases()
	if err := os.MkdirAll(sb.path(vmDir), 0o700); err != nil {
		return worker.SandboxStatus{}, fmt.Errorf("sandbox dir: %w", err)
	}
	if err := snapfile.WriteJSON(sb.path(specFile), spec); err != nil {
		return worker.SandboxStatus{}, err
	}
	faultinject.Point("create.recorded")
	// A pooled VM comes with its network (pool.go); else sb gets one now.
	var snap string
	var m manifest
	var haveSnap bool
	var pooled *poolEntry
	unlockTpl := func() {}
	defer func() { unlockTpl() }()
	if ck == nil {
		// The template snapshot stays until the restore has its copies; a
		// cold boot holds no lock.
		var unlock func()
		snap, m, haveSnap, unlock = w.templateSnapshot(ctx, spec)
		if haveSnap {
			unlockTpl = unlock
			pooled = w.takePooled(ctx, sb, snap, m)
		}
	}
	if pooled == nil {
		if err := w.netUp(ctx, sb, false); err != nil {
			return worker.SandboxStatus{}, err
		}
	}
	ph.mark("prepare")
	how := "cold boot"
	switch {
	case ck != nil:
		how = "branch of " + ck.meta.ID
		err = w.branch(ctx, sb, *ck)
	case haveSnap:
		how, err = w.restoreTemplate(ctx, sb, snap, m, pooled, ph)
	default:
		err = w.coldBoot(ctx, sb)
	}
	unlockTpl()
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	if ck != nil {
		faultinject.Point("branch.restored")
	} else {
		faultinject.Point("create.started")
	}
	if err := w.configure(ctx, sb.agent, spec); err != nil {
		return worker.SandboxStatus{}, fmt.Errorf("configure agent: %w", err)
	}
	ph.mark("configure")
	ph.log(w.log, "create phases", "sandbox", spec.ID, "how", how)
	took := time.Since(started)
	if w.cfg.ObserveBoot != nil {
		w.cfg.ObserveBoot(took)
	}
	st := sb.status()
	w.log.Info("sandbox started", "sandbox", spec.ID, "how", how, "vmm_pid", st.VMMPID, "took", took.Round(time.Millisecond))
	return st, nil
}

// coldBoot clones the template disk and boots the sandbox's VM.
func (w *Worker) coldBoot(ctx context.Context, sb *sandbox) error {
	spec := sb.spec
	tpl, err := w.loadTemplate(ctx, spec.Template)
	if err != nil {
		return err
	}
	diskBytes := max(tpl.SizeBytes, int64(spec.DiskMiB)<<20)
	// A reflink clone allocates nothing up front, but the guest may fill its
	// disk: refuse when the volume could not hold a fair share of it.
	if err := w.cfg.Storage.EnsureFree(ctx, diskBytes/4); err != nil {
		return err
	}
	if err := w.cfg.Storage.CloneAndGrow(ctx, tpl.Image, sb.path(diskFile), diskBytes); err != nil {
		return fmt.Errorf("clone template disk: %w", err)
	}
	if err := createMemFile(sb.path(memFile), spec.MemoryMiB); err != nil {
		return err
	}
	if err := sb.useDeviceSet(bootDeviceSet); err != nil {
		return err
	}
	vm, err := w.cfg.Driver.Start(ctx, w.bootSpec(sb, spec.VCPUs, spec.MemoryMiB))
	if err != nil {
		return fmt.Errorf("start vm: %w", err)
	}
	w.setVM(sb, vm, false)
	return w.waitAgent(ctx, vm, sb.agent)
}

// createMemFile makes an empty (sparse) guest RAM file of memMiB.
func createMemFile(path string, memMiB int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("memory file: %w: %v", errdefs.ErrInternal, err)
	}
	defer f.Close()
	if err := f.Truncate(int64(memMiB) << 20); err != nil {
		return snapfile.DiskError("size memory file", err)
	}
	return nil
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

// configure hands the agent its identity with fresh entropy and the clock,
// and a networked guest the egress CA to trust (when HTTPS injection is on).
func (w *Worker) configure(ctx context.Context, c *agentclient.Client, spec worker.SandboxSpec) error {
	seed := make([]byte, 64)
	if _, err := rand.Read(seed); err != nil {
		return err
	}
	host := hostname(spec)
	gn := guestNetwork(spec)
	var ca []byte
	if gn != nil && w.networking() {
		ca = w.cfg.Egress.TrustedCA()
	}
	return c.Configure(ctx, agentproto.Configure{
		SandboxID: spec.ID, Hostname: host, Env: spec.Env, Entropy: seed, Now: time.Now().UTC(),
		Network: gn, TrustedCA: ca,
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
	expected := sb.deleting || sb.vm != vm
	sb.mu.Unlock()
	if expected {
		return
	}
	tail := strings.Join(vm.ConsoleTail(20), "\n")
	w.log.Warn("sandbox VM exited", "sandbox", sb.spec.ID, "err", vm.Err(), "console", tail)
	select {
	// %w: the class says why (resource_exhausted: its memory limit).
	case w.exits <- worker.Exit{SandboxID: sb.spec.ID, Err: fmt.Errorf("vmm exited: %w", vm.Err())}:
	case <-w.closed:
	}
}

// DeleteSandbox stops the VM and removes the sandbox's files (its
// checkpoints stay). Deleting an unknown sandbox succeeds.
func (w *Worker) DeleteSandbox(ctx context.Context, id string) error {
	w.mu.Lock()
	sb, ok := w.sandboxes[id]
	w.mu.Unlock()
	if !ok {
		// Files of a sandbox this process never knew (a create that crashed
		// before registering) still go.
		if !validID(id) {
			return fmt.Errorf("sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
		}
		return removeAll(w.dir(id))
	}
	sb.mu.Lock()
	sb.deleting = true // fails agent calls and lifecycle calls waiting on op
	sb.mu.Unlock()
	sb.op.Lock()
	defer sb.op.Unlock()
	return w.teardown(ctx, sb)
}

// teardown undoes CreateSandbox in reverse order; safe to run twice.
func (w *Worker) teardown(ctx context.Context, sb *sandbox) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	sb.mu.Lock()
	sb.deleting = true
	vm := sb.vm
	sb.mu.Unlock()
	var errs []error
	sb.agent.Close()
	if vm != nil {
		if err := vm.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop vm: %w", err))
		}
	}
	faultinject.Point("delete.stopped")
	if err := w.netDown(ctx, sb); err != nil {
		errs = append(errs, err)
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

// validID accepts ids that are safe as one path element.
func validID(id string) bool {
	return id != "" && len(id) <= 128 && !strings.ContainsAny(id, "/.\x00")
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
