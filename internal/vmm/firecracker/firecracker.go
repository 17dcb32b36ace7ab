// Package firecracker is the VMM driver that runs each VM as a Firecracker
// microVM on a KVM host, controlled over Firecracker's HTTP API on a unix
// socket in the VM's StateDir. The client (api.go) is written against
// Firecracker's API specification (v1.16.1, ../shared/reference/
// firecracker-api.yaml), and the tests check every request it sends
// against that specification.
//
// The guest agent's link is Firecracker's hybrid vsock: the host connects
// to the VM's vsock unix socket, asks for the agent's port (CONNECT), and
// speaks the same agentproto stream as over QEMU's virtio-serial port.
//
// It owns the VMM processes it starts (jailed, each in its own process
// group, not tied to the worker's life so a restarted worker can adopt
// them) and the files it names in StateDir. It does not own disks,
// kernels, initrds or memory files: those belong to the caller.
package firecracker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
	"github.com/space-sandbox/space/internal/vmm/vmmproc"
)

// Name is the driver's registered name.
const Name = "firecracker"

// DefaultBinary is looked up in PATH when Options.Binary is empty.
const DefaultBinary = "firecracker"

// apiTimeout bounds waiting for a fresh (or adopted) VMM's API socket.
const apiTimeout = 15 * time.Second

// guestCID is the guest's vsock CID; every VM has its own vsock device
// behind its own unix socket, so all can use the first free CID.
const guestCID = 3

// ifaceID and driveID name the NIC and the drives in the API; a restore
// finds them by these names in the snapshot.
const ifaceID = "net0"

func driveID(i int) string { return fmt.Sprintf("disk%d", i) }

func init() {
	vmm.Register(Name, func(opts vmm.Options) (vmm.Driver, error) { return New(opts) })
}

// Driver starts Firecracker microVMs.
type Driver struct {
	opts      vmm.Options
	log       *slog.Logger
	binary    string
	binaryErr error
	launch    launch
}

var (
	_ vmm.Driver   = (*Driver)(nil)
	_ vmm.Restorer = (*Driver)(nil)
)

// New makes a driver. A missing binary or KVM is reported by Check and
// Start, not here, so a worker can start and say what is missing.
func New(opts vmm.Options) (*Driver, error) {
	switch opts.Accel {
	case "", "auto", "kvm":
	default:
		return nil, fmt.Errorf("firecracker: accel %q: Firecracker runs on KVM only: %w", opts.Accel, errdefs.ErrInvalidArgument)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d := &Driver{opts: opts, log: log.With("vmm", Name), launch: jailLaunch}
	bin := opts.Binary
	if bin == "" {
		bin = DefaultBinary
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		d.binaryErr = fmt.Errorf("firecracker: %s not found (install a Firecracker release binary under /usr/local/bin, or pass its path): %w", bin, errdefs.ErrFailedPrecondition)
	}
	d.binary = path
	if os.Geteuid() == 0 {
		jail.Sweep()
	}
	return d, nil
}

// Name implements vmm.Driver.
func (d *Driver) Name() string { return Name }

// Check reports whether the driver can start VMs here, naming what is
// missing: the binary (under /usr, where a jailed VMM can run it), a
// /dev/kvm that runs a probe guest and that the VMM's uid may open.
func (d *Driver) Check(ctx context.Context) error {
	if d.binaryErr != nil {
		return d.binaryErr
	}
	if bin, err := filepath.EvalSymlinks(d.binary); err != nil || !strings.HasPrefix(bin, "/usr/") {
		return fmt.Errorf("firecracker: %s must be under /usr (all a jailed VMM sees): %w", d.binary, errdefs.ErrFailedPrecondition)
	}
	if err := ProbeKVM(ctx); err != nil {
		return err
	}
	// The probe ran as root; the VMM runs as its jail's uid, in no group.
	if st, err := os.Stat("/dev/kvm"); err == nil && st.Mode().Perm()&0o006 != 0o006 {
		return fmt.Errorf("firecracker: /dev/kvm is mode %v, but a jailed VMM runs as a uid of its own and needs it 0666 "+
			"(systemd's udev rule makes it so; without udev: chmod 0666 /dev/kvm): %w", st.Mode().Perm(), errdefs.ErrFailedPrecondition)
	}
	return nil
}

// Start implements vmm.Driver: it starts Firecracker, configures the
// machine, boot source, drives, NIC, vsock and entropy device, and starts
// the instance.
func (d *Driver) Start(ctx context.Context, spec vmm.BootSpec) (vmm.VM, error) {
	v, err := d.start(ctx, spec, false)
	if err != nil {
		return nil, err
	}
	if err := v.boot(ctx); err != nil {
		return nil, v.failStart(ctx, err)
	}
	return v, nil
}

// start starts a jailed Firecracker for spec with its API answering and
// its logger set; it configures nothing else. incoming binds the memory
// file for a snapshot load. On error nothing is left running.
func (d *Driver) start(ctx context.Context, spec vmm.BootSpec, incoming bool) (*VM, error) {
	var err error
	if err = spec.Validate(); err != nil {
		return nil, fmt.Errorf("firecracker: %w: %v", errdefs.ErrInvalidArgument, err)
	}
	if d.binaryErr != nil {
		return nil, d.binaryErr
	}
	if incoming && spec.MemoryFile == "" {
		return nil, fmt.Errorf("firecracker: a restore needs the memory file: %w", errdefs.ErrInvalidArgument)
	}
	if spec, err = spec.Absolute(); err != nil {
		return nil, fmt.Errorf("firecracker: %w: %v", errdefs.ErrInvalidArgument, err)
	}
	for _, f := range []string{fileAPI, fileVsock} {
		if p := filepath.Join(spec.StateDir, dirRun, f); len(p) >= 108 {
			return nil, fmt.Errorf("firecracker: state dir path too long for a unix socket (%d bytes): %w", len(p), errdefs.ErrInvalidArgument)
		}
	}
	removeOwned(spec.StateDir)
	run, err := makeRunDir(spec.StateDir)
	if err != nil {
		return nil, fmt.Errorf("firecracker: run dir: %w: %v", errdefs.ErrInternal, err)
	}
	defer run.Close()
	nic, err := openNIC(spec)
	if err != nil {
		removeOwned(spec.StateDir)
		return nil, err
	}
	defer nic.close() // once the VMM's uid owns the tap
	logs, err := openLogs(spec.StateDir, run)
	if err != nil {
		removeOwned(spec.StateDir)
		return nil, fmt.Errorf("firecracker: logs: %w", err)
	}
	defer logs.close() // the VMM and the log copier have their own
	// Firecracker writes the guest's serial console to its stdout.
	js, err := d.jailSpec(spec, incoming, logs.console.Writer(), logs.stderr.Writer())
	if err != nil {
		removeOwned(spec.StateDir)
		return nil, err
	}
	js.Logs = logs.all()
	// The record is written before Firecracker may run (jail.Spec.Record),
	// so a worker that dies from here on leaves a VMM the next one finds.
	js.Record = func(pid int, start uint64, st jail.State) error {
		return writeRecord(spec.StateDir, record{Spec: spec, PID: pid, StartTime: start, Binary: d.binary,
			Tap: nic.name, Incoming: incoming, Jail: &st})
	}
	cmd, jst, err := d.launch(js, nic.netns)
	if err != nil {
		removeOwned(spec.StateDir)
		return nil, fmt.Errorf("firecracker: start %s: %w", filepath.Base(d.binary), err)
	}
	pid := cmd.Process.Pid
	v := &VM{
		d: d, dir: spec.StateDir, log: d.log.With("vm", spec.ID, "pid", pid),
		done: make(chan struct{}),
		rec:  record{Spec: spec, PID: pid, Binary: d.binary, Tap: nic.name, Incoming: incoming, Jail: &jst},
	}
	v.api = newClient(filepath.Join(spec.StateDir, dirRun, fileAPI))
	go func() {
		werr := cmd.Wait()
		v.setExit(werr)
		close(v.done)
	}()
	st, err := jail.StartTime(pid)
	if err != nil {
		return nil, v.failStart(ctx, fmt.Errorf("firecracker: exited at start: %w", errdefs.ErrUnavailable))
	}
	v.rec.StartTime = st
	if err := writeRecord(spec.StateDir, v.rec); err != nil {
		return nil, v.failStart(ctx, fmt.Errorf("firecracker: record state: %w: %v", errdefs.ErrInternal, err))
	}
	actx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if err := v.api.await(actx, v.done); err != nil {
		return nil, v.failStart(ctx, err)
	}
	// The VMM runs as its own uid now: hand it its run dir (the jail gave
	// it the logger's FIFO) and its tap.
	if err := giveRunDir(run, jst.UID); err != nil {
		return nil, v.failStart(ctx, fmt.Errorf("firecracker: run dir: %w: %v", errdefs.ErrInternal, err))
	}
	if err := nic.giveTo(jst.UID); err != nil {
		return nil, v.failStart(ctx, err)
	}
	nic.close() // Firecracker attaches the tap itself; a non-multiqueue tap takes one fd
	if err := v.client().put(ctx, "/logger", logger{LogPath: jailLog, Level: "Warning", ShowLevel: true}); err != nil {
		return nil, v.failStart(ctx, err)
	}
	v.log.Debug("vmm started", "incoming", incoming)
	return v, nil
}

// boot configures a fresh VMM as spec says and starts the instance. The
// order is Firecracker's: everything pre-boot, then InstanceStart.
func (v *VM) boot(ctx context.Context) error {
	spec := v.rec.Spec
	cmdline := []string{"console=ttyS0", "reboot=k", "panic=-1", "pci=off"}
	if spec.Cmdline != "" {
		cmdline = append(cmdline, spec.Cmdline)
	}
	bs := bootSource{KernelImagePath: jailKernel, BootArgs: strings.Join(cmdline, " ")}
	if spec.Initrd != "" {
		bs.InitrdPath = jailInitrd
	}
	calls := []struct {
		path string
		body any
	}{
		{"/machine-config", machineConfig{VCPUCount: spec.VCPUs, MemSizeMiB: spec.MemoryMiB}},
		{"/boot-source", bs},
	}
	for i, disk := range spec.Disks {
		calls = append(calls, struct {
			path string
			body any
		}{"/drives/" + driveID(i), drive{
			DriveID: driveID(i), IsRootDevice: false, IsReadOnly: disk.ReadOnly,
			PathOnHost: jailDisk(i), CacheType: "Writeback", IOEngine: "Sync",
		}})
	}
	if spec.Network != nil {
		calls = append(calls, struct {
			path string
			body any
		}{"/network-interfaces/" + ifaceID, networkInterface{IfaceID: ifaceID, HostDevName: v.rec.Tap, GuestMAC: spec.Network.MAC}})
	}
	calls = append(calls, []struct {
		path string
		body any
	}{
		{"/vsock", vsock{GuestCID: guestCID, UDSPath: jailVsock}},
		{"/entropy", entropyDevice{}},
		{"/actions", instanceAction{ActionType: actionInstanceStart}},
	}...)
	for _, c := range calls {
		if err := v.client().put(ctx, c.path, c.body); err != nil {
			return err
		}
	}
	return nil
}

// failStart stops a VMM that did not get through start or boot and
// returns err with the VMM's last log lines.
func (v *VM) failStart(ctx context.Context, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	v.beginStop()
	if j := v.rec.Jail; j != nil {
		j.Kill()
	}
	_ = vmmproc.KillGroup(cctx, v.rec.PID, v.done)
	var tail []string
	tail = append(tail, vmmproc.TailLines(filepath.Join(v.dir, fileVMMLog), 4096, 3)...)
	tail = append(tail, vmmproc.TailLines(filepath.Join(v.dir, fileHostLog), 4096, 3)...)
	if len(tail) > 0 {
		err = fmt.Errorf("%w (firecracker: %s)", err, strings.Join(tail, " | "))
	}
	if j := v.rec.Jail; j != nil {
		j.Release()
	}
	v.freezeConsole()
	removeOwned(v.dir)
	v.markStopped()
	return err
}

// Recover implements vmm.Driver.
func (d *Driver) Recover(ctx context.Context, stateDir string) (vmm.VM, error) {
	rec, err := readRecord(stateDir)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			removeOwned(stateDir)
		}
		return nil, fmt.Errorf("firecracker: recover: %w", err)
	}
	v := &VM{
		d: d, dir: stateDir, rec: rec,
		log:  d.log.With("vm", rec.Spec.ID, "pid", rec.PID),
		done: make(chan struct{}),
		api:  newClient(filepath.Join(stateDir, dirRun, fileAPI)),
	}
	gone := func() (vmm.VM, error) {
		_ = syscall.Kill(-rec.PID, syscall.SIGKILL)
		if rec.Jail != nil {
			rec.Jail.Kill()
			rec.Jail.Release()
		}
		removeOwned(stateDir)
		return nil, fmt.Errorf("firecracker: recover %s: vmm is gone: %w", rec.Spec.ID, errdefs.ErrNotFound)
	}
	if !alive(rec.PID, rec.StartTime) {
		return gone()
	}
	pidfd, err := unix.PidfdOpen(rec.PID, 0)
	if err != nil {
		return gone()
	}
	// Re-check after taking the pidfd: the PID could have been reused in between.
	if !alive(rec.PID, rec.StartTime) {
		unix.Close(pidfd)
		return gone()
	}
	go func() {
		vmmproc.WaitPidfd(pidfd)
		v.setExit(errors.New("adopted vmm exited"))
		close(v.done)
	}()
	actx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if err := v.api.await(actx, v.done); err != nil {
		select {
		case <-v.done:
			return gone()
		default:
		}
		return nil, fmt.Errorf("firecracker: recover %s: vmm %d runs but its api does not answer: %w (%v)",
			rec.Spec.ID, rec.PID, errdefs.ErrUnavailable, err)
	}
	v.log.Info("vmm adopted")
	return v, nil
}
