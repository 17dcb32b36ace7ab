// Package qemu is the VMM driver that runs each VM as a qemu-system-x86_64
// microvm process, controlled over QMP on a unix socket in the VM's StateDir.
//
// It owns the VMM processes it starts (each jailed, see jail.go, in its own
// process group, not tied to the worker's life so a restarted worker can
// adopt them) and the files it names in StateDir. It does not own disks,
// kernels, initrds or memory files: those belong to the caller (the jail
// chowns the memory file and writable disks to the VMM's uid).
package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/vmmproc"
)

// Name is the driver's registered name.
const Name = "qemu"

// DefaultBinary is looked up in PATH when Options.Binary is empty.
const DefaultBinary = "qemu-system-x86_64"

const machineOpts = "microvm,acpi=on,pit=on,pic=on,rtc=on"

// qmpTimeout bounds connecting to a fresh (or adopted) VMM's QMP socket.
const qmpTimeout = 15 * time.Second

func init() {
	vmm.Register(Name, func(opts vmm.Options) (vmm.Driver, error) { return New(opts) })
}

// Driver starts QEMU microVMs.
type Driver struct {
	opts      vmm.Options
	log       *slog.Logger
	binary    string
	binaryErr error

	accelMu    sync.Mutex
	accelCache map[string]string

	tscOnce sync.Once
	tscKHz  int
}

var (
	_ vmm.Driver   = (*Driver)(nil)
	_ vmm.Restorer = (*Driver)(nil)
)

// New makes a driver. A missing QEMU binary is reported by Check and Start,
// not here, so a worker can start and say what is missing.
func New(opts vmm.Options) (*Driver, error) {
	switch opts.Accel {
	case "", AccelAuto, AccelKVM, AccelTCG:
	default:
		return nil, fmt.Errorf("qemu: unknown accel %q (want auto, kvm or tcg): %w", opts.Accel, errdefs.ErrInvalidArgument)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d := &Driver{opts: opts, log: log.With("vmm", Name), accelCache: map[string]string{}}
	bin := opts.Binary
	if bin == "" {
		bin = DefaultBinary
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		d.binaryErr = fmt.Errorf("qemu: %s not found (install the Debian package qemu-system-x86): %w", bin, errdefs.ErrFailedPrecondition)
	}
	d.binary = path
	// Ids and cgroups of jails whose VMM died while no worker watched.
	if os.Geteuid() == 0 {
		jail.Sweep()
	}
	return d, nil
}

// Name implements vmm.Driver.
func (d *Driver) Name() string { return Name }

// Check reports whether the driver can start VMs (the QEMU binary exists).
func (d *Driver) Check(ctx context.Context) error { return d.binaryErr }

// Accel resolves the accelerator Start would use for kernel ("kvm" or "tcg").
func (d *Driver) Accel(ctx context.Context, kernel string) (string, error) {
	if d.binaryErr != nil {
		return "", d.binaryErr
	}
	return d.resolveAccel(ctx, kernel)
}

// Start implements vmm.Driver.
func (d *Driver) Start(ctx context.Context, spec vmm.BootSpec) (vmm.VM, error) {
	v, err := d.start(ctx, spec, false)
	if err != nil {
		return nil, err
	}
	return v, nil
}

func (d *Driver) start(ctx context.Context, spec vmm.BootSpec, incoming bool) (*VM, error) {
	var err error
	if err = spec.Validate(); err != nil {
		return nil, fmt.Errorf("qemu: %w: %v", errdefs.ErrInvalidArgument, err)
	}
	if d.binaryErr != nil {
		return nil, d.binaryErr
	}
	for _, f := range []string{fileQMP, fileAgent} {
		if p := filepath.Join(spec.StateDir, f); len(p) >= 108 {
			return nil, fmt.Errorf("qemu: state dir path too long for a unix socket (%d bytes): %w", len(p), errdefs.ErrInvalidArgument)
		}
	}
	// The jail binds the caller's files by their host paths (the worker
	// binds the sockets); make them absolute.
	if spec, err = spec.Absolute(); err != nil {
		return nil, fmt.Errorf("qemu: %w: %v", errdefs.ErrInvalidArgument, err)
	}
	accel, err := d.resolveAccel(ctx, spec.Kernel)
	if err != nil {
		return nil, err
	}
	removeOwned(spec.StateDir)

	h, err := openHandout(spec)
	if err != nil {
		removeOwned(spec.StateDir)
		return nil, err
	}
	defer h.close() // QEMU has its own copies once started
	// run is what the VMM is started with; spec is what it is recorded as.
	run := spec
	if incoming {
		if run, err = writeRestoreKernel(spec); err != nil {
			removeOwned(spec.StateDir)
			return nil, err
		}
	}
	args := d.args(run, accel, incoming, h)
	js, err := d.jailSpec(run, accel, args, h)
	if err != nil {
		removeOwned(spec.StateDir)
		return nil, err
	}
	// The record is written before QEMU may run (jail.Spec.Record): a
	// worker that dies from here on leaves a VMM the next one adopts or
	// reaps, never one nobody knows of.
	var rec record
	js.Record = func(pid int, start uint64, st jail.State) error {
		rec = record{Spec: spec, PID: pid, StartTime: start, Accel: accel, Binary: d.binary, Incoming: incoming, Jail: &st, BoundedLogs: true}
		return writeRecord(spec.StateDir, rec)
	}
	tJail := time.Now()
	j, err := jail.Start(js)
	h.close() // QEMU and the log copier have their own copies
	tExec := time.Now()
	if err != nil {
		removeOwned(spec.StateDir)
		return nil, fmt.Errorf("qemu: start %s: %w", filepath.Base(d.binary), err)
	}
	cmd := j.Cmd
	pid := cmd.Process.Pid
	jst := j.State
	v := &VM{
		d: d, dir: spec.StateDir, log: d.log.With("vm", spec.ID, "pid", pid),
		done: make(chan struct{}), cons: newConsole(spec.StateDir),
		rec: rec,
	}
	go func() {
		werr := cmd.Wait()
		v.setExit(werr)
		close(v.done)
	}()
	fail := func(err error) (*VM, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		_ = vmmproc.KillGroup(cctx, pid, v.done)
		if tail := vmmproc.TailLines(filepath.Join(spec.StateDir, fileVMMLog), 4096, 5); len(tail) > 0 {
			err = fmt.Errorf("%w (qemu: %s)", err, strings.Join(tail, " | "))
		}
		jst.Release()
		removeOwned(spec.StateDir)
		return nil, err
	}

	qctx, cancel := context.WithTimeout(ctx, qmpTimeout)
	defer cancel()
	q, err := dialQMP(qctx, filepath.Join(spec.StateDir, fileQMP), v.done)
	if err != nil {
		return fail(fmt.Errorf("qemu: %w", err))
	}
	v.qmp = q
	// jail: set-up until QEMU runs; init: from there to QMP's greeting.
	v.log.Debug("vmm started", "accel", accel, "jail", tExec.Sub(tJail), "init", time.Since(tExec))
	return v, nil
}

// args builds the QEMU command line. The device order is fixed: a restore
// needs the same devices in the same order as the snapshot's VM.
func (d *Driver) args(spec vmm.BootSpec, accel string, incoming bool, h *handout) []string {
	machine := machineOpts
	if spec.MemoryFile != "" {
		machine += ",memory-backend=mem"
	}
	cmdline := []string{"console=ttyS0", "panic=-1"}
	if accel == AccelTCG {
		d.tscOnce.Do(func() { d.tscKHz = hostTSCkHz(d.log) })
		if d.tscKHz > 0 {
			cmdline = append(cmdline, "tsc_early_khz="+strconv.Itoa(d.tscKHz))
		}
	}
	if spec.Cmdline != "" {
		cmdline = append(cmdline, spec.Cmdline)
	}
	a := []string{
		"-name", spec.ID,
		"-M", machine, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
	}
	a = append(a, sandboxArgs...)
	a = append(a, accelArgs(accel)...)
	a = append(a, h.fdsetArgs()...)
	a = append(a,
		"-m", strconv.Itoa(spec.MemoryMiB), "-smp", strconv.Itoa(spec.VCPUs),
		"-kernel", jailKernel, "-append", strings.Join(cmdline, " "),
	)
	if spec.Initrd != "" {
		a = append(a, "-initrd", jailInitrd)
	}
	if spec.MemoryFile != "" {
		a = append(a, "-object", fmt.Sprintf("memory-backend-file,id=mem,size=%dM,mem-path=%s,share=on",
			spec.MemoryMiB, jailMemory))
	}
	a = append(a,
		"-chardev", fmt.Sprintf("file,id=con,append=on,path=/dev/fdset/%d", consoleSet), "-serial", "chardev:con",
		"-chardev", fmt.Sprintf("socket,id=qmp,server=on,wait=off,fd=%d", h.qmp), "-mon", "chardev=qmp,mode=control",
	)
	for i, disk := range spec.Disks {
		drive := fmt.Sprintf("id=disk%d,file=/dev/fdset/%d,format=raw,if=none,cache=none,aio=threads", i, diskSet(i))
		if disk.ReadOnly {
			drive += ",readonly=on"
		} else {
			// -drive defaults to auto-read-only=on, under which QEMU reopens
			// the image read-only when a migration (snapshot) inactivates
			// it; its fdset holds only the read-write fd.
			drive += ",auto-read-only=off"
		}
		a = append(a, "-drive", drive, "-device", fmt.Sprintf("virtio-blk-device,drive=disk%d", i))
	}
	a = append(a,
		"-device", "virtio-serial-device",
		"-chardev", fmt.Sprintf("socket,id=agent,server=on,wait=off,fd=%d", h.agent),
		"-device", "virtserialport,chardev=agent,name="+agentproto.PortName,
		"-device", "virtio-rng-device",
	)
	if spec.FreePageReporting {
		a = append(a, balloonArgs...)
	}
	a = append(a, netArgs(spec, h.tap)...)
	if incoming {
		// -S keeps the restored VM paused until the caller resumes it.
		a = append(a, "-S", "-incoming", "defer")
	}
	return a
}

// Recover implements vmm.Driver.
func (d *Driver) Recover(ctx context.Context, stateDir string) (vmm.VM, error) {
	rec, err := readRecord(stateDir)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			removeOwned(stateDir)
		}
		return nil, fmt.Errorf("qemu: recover: %w", err)
	}
	v := &VM{
		d: d, dir: stateDir, rec: rec, adopted: true,
		log:  d.log.With("vm", rec.Spec.ID, "pid", rec.PID),
		done: make(chan struct{}), cons: newConsole(stateDir),
	}
	gone := func() (vmm.VM, error) {
		// The group may still hold helpers of the dead VMM.
		_ = syscall.Kill(-rec.PID, syscall.SIGKILL)
		if rec.Jail != nil {
			rec.Jail.Kill()
			rec.Jail.Release()
		}
		removeOwned(stateDir)
		return nil, fmt.Errorf("qemu: recover %s: vmm is gone: %w", rec.Spec.ID, errdefs.ErrNotFound)
	}
	if !alive(rec.PID, rec.StartTime) {
		return gone()
	}
	pidfd, err := pidfdOpen(rec.PID)
	if err != nil {
		return gone()
	}
	// Re-check after taking the pidfd: the PID could have been reused in between.
	if !alive(rec.PID, rec.StartTime) {
		closeFD(pidfd)
		return gone()
	}
	go func() {
		vmmproc.WaitPidfd(pidfd)
		v.setExit(errors.New("adopted vmm exited"))
		close(v.done)
	}()

	qctx, cancel := context.WithTimeout(ctx, qmpTimeout)
	defer cancel()
	q, err := dialQMP(qctx, filepath.Join(stateDir, fileQMP), v.done)
	if err != nil {
		select {
		case <-v.done:
			return gone()
		default:
		}
		// Not killed: the VMM may be healthy and held by another live worker
		// process (QMP serves one client at a time).
		return nil, fmt.Errorf("qemu: recover %s: vmm %d runs but does not answer on qmp: %w (%v)",
			rec.Spec.ID, rec.PID, errdefs.ErrUnavailable, err)
	}
	v.qmp = q
	if !rec.BoundedLogs {
		// Started by a worker before the log copier: QEMU appends to the
		// console file itself, and only a worker rotates it.
		go v.cons.rotateLegacy(v.done)
	}
	v.log.Info("vmm adopted")
	return v, nil
}
