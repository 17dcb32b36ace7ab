package firecracker

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/vmm"
)

// Every VMM runs in a jail (package jail): its own uid, no capabilities,
// no_new_privs, a read-only root of its own holding /usr, a cgroup with
// limits, and Firecracker's own seccomp filters (on by default; the driver
// never passes --no-seccomp). Firecracker opens everything by path, so the
// files of this VM are bound into the jail's root under fixed names
// (below); the one writable directory is the run dir, bound at /run, where
// Firecracker creates its API and vsock sockets, its log, and the files of
// a snapshot being made.

// Names in the jail's root, as Firecracker is told them.
const (
	jailKernel  = "/vmlinux"
	jailInitrd  = "/initrd"
	jailMemory  = "/memory"
	jailRun     = "/run"
	jailAPI     = jailRun + "/" + fileAPI
	jailVsock   = jailRun + "/" + fileVsock
	jailLog     = jailRun + "/" + fileFCLog
	jailVMState = jailRun + "/" + fileLoadState
	jailNewMem  = jailRun + "/" + fileNewMemory
	jailNewVM   = jailRun + "/" + fileNewState
)

func jailDisk(i int) string { return "/disk" + strconv.Itoa(i) }

// vmmOverheadMiB is what Firecracker needs besides guest RAM (its heap,
// device emulation, page tables): the Firecracker project states under 5
// MiB per microVM; the bound leaves room for the vCPU threads' stacks and
// the snapshot code's buffers.
const vmmOverheadMiB = 64

// limits are the VMM's cgroup limits: guest RAM plus the overhead; threads
// for the vCPUs, the API and the VMM's event loop (Firecracker starts no
// I/O pool); one CPU per vCPU plus half of one for device emulation.
func limits(spec vmm.BootSpec) jail.Limits {
	return jail.Limits{
		MemoryBytes: int64(spec.MemoryMiB+vmmOverheadMiB) << 20,
		PIDs:        32 + 2*spec.VCPUs,
		CPUs:        float64(spec.VCPUs) + 0.5,
		IOWeight:    100,
		NoFile:      1024,
	}
}

// launch starts a jailed process; tests replace it with the spec-checking
// stand-in (which gets the same jail.Spec, so it sees the paths the real
// VMM would see).
type launch func(js jail.Spec, netns *os.File) (*exec.Cmd, jail.State, error)

// jailLaunch is the production launch. netns is the network namespace the
// VMM must run in to open the sandbox's tap by name.
func jailLaunch(js jail.Spec, netns *os.File) (*exec.Cmd, jail.State, error) {
	// Firecracker opens /dev/net/tun itself and a tap is found in the
	// namespace of that open: the VMM runs in the sandbox's namespace.
	js.NetNS = netns
	j, err := jail.Start(js)
	if err != nil {
		return nil, jail.State{}, err
	}
	return j.Cmd, j.State, nil
}

// jailSpec is the jail of spec's VMM. restoreMem binds the memory file a
// snapshot load maps (read-only: Firecracker maps it privately and must
// never write it, since a clone's memory file stays immutable while mapped).
func (d *Driver) jailSpec(spec vmm.BootSpec, restoreMem bool, stdout, stderr *os.File) (jail.Spec, error) {
	bin, err := filepath.EvalSymlinks(d.binary)
	if err != nil || !strings.HasPrefix(bin, "/usr/") {
		return jail.Spec{}, fmt.Errorf("firecracker: the VMM binary must be under /usr (all a jailed VMM sees), not %s: %w", d.binary, errdefs.ErrFailedPrecondition)
	}
	js := jail.Spec{
		Root: spec.StateDir,
		Files: []jail.File{
			{Name: name(jailKernel), Source: spec.Kernel},
			{Name: name(jailRun), Source: filepath.Join(spec.StateDir, dirRun), Writable: true},
		},
		Devices: []string{"/dev/kvm"},
		Path:    bin,
		// argv[0] names the state dir, so ps and the leak checks find a
		// VMM by the directory it belongs to.
		Args: []string{filepath.Join(spec.StateDir, filepath.Base(bin)),
			"--api-sock", jailAPI, "--id", instanceID(spec.ID)},
		Stdout: stdout, Stderr: stderr,
		Limits: limits(spec),
	}
	if spec.Initrd != "" {
		if err := worldReadable(spec.Initrd); err != nil {
			return jail.Spec{}, err
		}
		js.Files = append(js.Files, jail.File{Name: name(jailInitrd), Source: spec.Initrd})
	}
	if err := worldReadable(spec.Kernel); err != nil {
		return jail.Spec{}, err
	}
	for i, disk := range spec.Disks {
		js.Files = append(js.Files, jail.File{Name: name(jailDisk(i)), Source: disk.Path, Writable: !disk.ReadOnly})
		if disk.ReadOnly {
			// Shared read-only images cannot be given to one VMM's uid.
			if err := worldReadable(disk.Path); err != nil {
				return jail.Spec{}, err
			}
		} else {
			js.Own = append(js.Own, disk.Path)
		}
	}
	if spec.Network != nil {
		// Firecracker attaches to the tap itself.
		js.Devices = append(js.Devices, "/dev/net/tun")
	}
	if restoreMem {
		js.Files = append(js.Files, jail.File{Name: name(jailMemory), Source: spec.MemoryFile})
		js.Own = append(js.Own, spec.MemoryFile)
	}
	return js, nil
}

func name(jailPath string) string { return strings.TrimPrefix(jailPath, "/") }

// worldReadable checks that a file shared between VMMs can be read by
// any VMM's uid (the jail binds it; it cannot be chowned to one of them).
func worldReadable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("firecracker: %s: %w", filepath.Base(path), errdefs.ErrNotFound)
	}
	if st.Mode().Perm()&0o004 == 0 {
		return fmt.Errorf("firecracker: %s must be readable by the jailed VMM (mode o+r): %w", filepath.Base(path), errdefs.ErrFailedPrecondition)
	}
	return nil
}

// instanceID is Firecracker's --id: alphanumerics and hyphens, 1 to 64.
func instanceID(id string) string {
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	if len(b) == 0 {
		return "vm"
	}
	return string(b)
}

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
