package qemu

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
)

// Every VMM runs in a jail (package jail): its own uid, no capabilities,
// no_new_privs, a root of its own, an empty network namespace, a cgroup
// with limits, and QEMU's seccomp filter on top (-sandbox). What QEMU
// opens by path is bound into its root (kernel, initramfs, memory file:
// QEMU 7.2 opens those with plain open(2), which fdsets cannot serve);
// everything else is an fd the worker opened: the disks and the console
// log's pipe through fdsets (-add-fd, /dev/fdset/N), the QMP and agent sockets as
// listening sockets the worker bound in the state dir (so they stay
// root's, 0600, and keep working when a pool renames the dir), the tap,
// and the migration streams (QMP getfd), so QEMU never needs to create a
// file or run a helper.

// Names in the jail's root.
const (
	jailKernel = "/kernel"
	jailInitrd = "/initrd"
	jailMemory = "/memory"
)

// sandboxArgs is QEMU's seccomp filter: no obsolete syscalls, no setuid and
// friends, no fork/exec, no scheduler or affinity changes.
var sandboxArgs = []string{"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"}

// vmmOverheadMiB is what QEMU may use besides guest RAM: its own heap and
// device models, the TCG translation cache (bounded by tcgTBSizeMiB) and
// the kernel memory charged for it (page tables for guest RAM). Measured
// under TCG here (256 MiB and 1 GiB guests, base template): QEMU's
// RssAnon is 37 MiB after boot and 65 MiB after fork storms, every
// busybox applet and a memory hog; its cgroup's peak usage minus the guest
// RAM it touched was 95 MiB. 128 MiB for that plus the whole translation
// cache leaves room without letting a leak grow far.
const vmmOverheadMiB = 256

// tcgTBSizeMiB bounds TCG's translation cache (QEMU's default is 1 GiB,
// which code-heavy guests such as a fork bomb fill, growing the VMM by as
// much), so the overhead above holds.
const tcgTBSizeMiB = 128

// limits are the VMM's cgroup limits: guest memory plus the measured
// overhead; threads for the vCPUs, QEMU's own and its I/O pool (up to 64
// for aio=threads); one CPU per vCPU plus half of one for the main loop
// and I/O threads.
func limits(spec vmm.BootSpec) jail.Limits {
	return jail.Limits{
		MemoryBytes: int64(spec.MemoryMiB+vmmOverheadMiB) << 20,
		PIDs:        128 + 2*spec.VCPUs,
		CPUs:        float64(spec.VCPUs) + 0.5,
		IOWeight:    100,
		NoFile:      1024,
	}
}

// handout is what the worker opens for a VMM: ExtraFiles (fd 3+i in
// QEMU) and what each is for.
type handout struct {
	files   []*os.File
	tap     int // fd of the tap, or -1
	qmp     int // listening socket fds
	agent   int
	console int   // fd of the console log's pipe (fdset 1)
	disks   []int // fd per disk (fdset 2+i)
	// The bounded logs: the console, and QEMU's stdout and stderr.
	consoleLog, vmmLog *jail.Log
}

const consoleSet = 1

func diskSet(i int) int { return 2 + i }

func (h *handout) add(f *os.File) int {
	h.files = append(h.files, f)
	return 2 + len(h.files)
}

func (h *handout) close() {
	_ = closeFiles(h.files)
	for _, l := range []*jail.Log{h.consoleLog, h.vmmLog} {
		if l != nil {
			l.Close()
		}
	}
}

// openHandout opens the tap, binds the sockets, makes the logs and opens
// the disks. On error nothing stays open (the sockets' files are
// removed with the state dir's other owned files).
func openHandout(spec vmm.BootSpec) (_ *handout, err error) {
	h := &handout{tap: -1}
	defer func() {
		if err != nil {
			h.close()
		}
	}()
	nics, err := netFiles(spec)
	if err != nil {
		return nil, err
	}
	if len(nics) == 1 {
		h.tap = h.add(nics[0])
	}
	for _, s := range []struct {
		name string
		fd   *int
	}{{fileQMP, &h.qmp}, {fileAgent, &h.agent}} {
		f, err := listenUnix(filepath.Join(spec.StateDir, s.name))
		if err != nil {
			return nil, fmt.Errorf("qemu: socket %s: %w: %v", s.name, errdefs.ErrInternal, err)
		}
		*s.fd = h.add(f)
	}
	for _, l := range []struct {
		file string
		keep int64
		to   **jail.Log
	}{{fileConsole, consoleKeep, &h.consoleLog}, {fileVMMLog, vmmLogKeep, &h.vmmLog}} {
		if *l.to, err = jail.NewLog(filepath.Join(spec.StateDir, l.file), l.keep); err != nil {
			return nil, fmt.Errorf("qemu: %w", err)
		}
	}
	h.console = h.add(h.consoleLog.Writer())
	for i, d := range spec.Disks {
		flag := os.O_RDWR
		if d.ReadOnly {
			flag = os.O_RDONLY
		}
		f, err := os.OpenFile(d.Path, flag, 0)
		if err != nil {
			return nil, fmt.Errorf("qemu: disk %d: %w: %v", i, errdefs.ErrNotFound, err)
		}
		h.disks = append(h.disks, h.add(f))
	}
	return h, nil
}

// fdsetArgs puts the console and the disks into their fdsets.
func (h *handout) fdsetArgs() []string {
	a := []string{"-add-fd", fmt.Sprintf("fd=%d,set=%d", h.console, consoleSet)}
	for i, fd := range h.disks {
		a = append(a, "-add-fd", fmt.Sprintf("fd=%d,set=%d", fd, diskSet(i)))
	}
	return a
}

// listenUnix binds a listening unix socket at path (mode 0600) and
// returns it as a file for QEMU; unlike net.Listen, closing the file does
// not remove the socket's path.
func listenUnix(path string) (*os.File, error) {
	_ = os.Remove(path)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Listen(fd, 4); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// jailSpec is the jail for spec's VMM running args.
func (d *Driver) jailSpec(spec vmm.BootSpec, accel string, args []string, h *handout) (jail.Spec, error) {
	bin, err := filepath.EvalSymlinks(d.binary)
	if err != nil || !strings.HasPrefix(bin, "/usr/") {
		return jail.Spec{}, fmt.Errorf("qemu: the VMM binary must be under /usr (all a jailed VMM sees): %w", errdefs.ErrFailedPrecondition)
	}
	js := jail.Spec{
		Root:  spec.StateDir,
		Files: []jail.File{{Name: strings.TrimPrefix(jailKernel, "/"), Source: spec.Kernel}},
		Path:  bin,
		// argv[0] names the state dir (QEMU does not need its real path:
		// its data dirs are compiled in), so that ps and the leak checks
		// find a VMM by the directory it belongs to.
		Args:       append([]string{filepath.Join(spec.StateDir, filepath.Base(bin))}, args...),
		ExtraFiles: h.files,
		Stdout:     h.vmmLog.Writer(), Stderr: h.vmmLog.Writer(),
		Logs:   []*jail.Log{h.consoleLog, h.vmmLog},
		Limits: limits(spec),
	}
	if spec.Initrd != "" {
		js.Files = append(js.Files, jail.File{Name: strings.TrimPrefix(jailInitrd, "/"), Source: spec.Initrd})
	}
	if spec.MemoryFile != "" {
		// QEMU would create a missing memory file; in the jail it cannot.
		f, err := os.OpenFile(spec.MemoryFile, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return jail.Spec{}, fmt.Errorf("qemu: memory file: %w: %v", errdefs.ErrInternal, err)
		}
		f.Close()
		js.Files = append(js.Files, jail.File{Name: strings.TrimPrefix(jailMemory, "/"), Source: spec.MemoryFile, Writable: true})
		js.Own = append(js.Own, spec.MemoryFile)
	}
	for _, disk := range spec.Disks {
		if !disk.ReadOnly {
			js.Own = append(js.Own, disk.Path)
		}
	}
	if accel == AccelKVM {
		js.Devices = []string{"/dev/kvm"}
	}
	return js, nil
}

// Jail is the VM's jail as recorded (nil for a VMM started before jails).
func (v *VM) Jail() *jail.State { return v.rec.Jail }

// Limits are the cgroup limits a VMM for spec runs under.
func Limits(spec vmm.BootSpec) jail.Limits { return limits(spec) }

// RecordedJail reads what Start recorded in stateDir: the VMM's pid, its
// jail and its spec (for the limits), so tests can check a VMM they did
// not start themselves (pooled, adopted).
func RecordedJail(stateDir string) (int, *jail.State, vmm.BootSpec, error) {
	rec, err := readRecord(stateDir)
	if err != nil {
		return 0, nil, vmm.BootSpec{}, err
	}
	return rec.PID, rec.Jail, rec.Spec, nil
}
