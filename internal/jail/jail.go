// Package jail starts a VMM process (QEMU today, Firecracker later) with as
// little of the host as it can run with, so that a guest that takes over
// its VMM through a device-model bug gains almost nothing:
//
//   - its own uid and gid, drawn per VMM from a reserved range (ids.go),
//     not one shared "space-vmm" user: two VMMs never share an id, so one
//     cannot signal, ptrace or open the files of another even if both were
//     somehow in view; the files a VMM writes (memory file, disks) are
//     chowned to it with mode 0600;
//   - no capabilities (bounding set emptied, then setuid to the id), and
//     no_new_privs, so nothing it executes can gain any;
//   - a private mount namespace whose root (after pivot_root) is a small
//     read-only tmpfs holding /usr (read-only, for the binary, its
//     libraries and firmware), /dev/null, /dev/zero, /dev/urandom (and
//     /dev/kvm when asked) and the files of this one VM, bound in by the
//     caller's list; no /etc, /proc, /sys, /tmp, data dir or other VM;
//     everything else is handed in as open file descriptors by the caller;
//   - a network namespace of its own with nothing in it (the VMM reaches
//     its guest's network through a tap fd it inherits; it needs no
//     network itself, which is stricter than joining the sandbox's
//     namespace, where the egress listeners are), and its own IPC and UTS
//     namespaces;
//   - a cgroup of its own (cgroup.go) with memory, pids, cpu and io
//     limits, so one VMM cannot starve the host or the other sandboxes;
//   - RLIMIT_CORE 0 (no dumps of guest memory) and a bounded RLIMIT_NOFILE.
//
// Go cannot run code between fork and exec, and pivot_root, the mounts and
// the privilege drop must happen in the child, so Start re-executes the
// running binary (/proc/self/exe: no second artifact to build, install or
// find, and test binaries work the same way) as a jail init, which this
// package's init function recognises: it joins the cgroups, sets up the
// root, drops privileges and executes the VMM, keeping its pid. The VMM
// has no parent-death signal, so it survives a restart of the worker and
// can be adopted; State is what the caller records for that.
//
// Two things the host does around a jailed VMM live here too, because a
// VMM taken over by its guest attacks them: its logs are bounded by a
// copier process that reads its pipes (log.go), and what it can write is
// opened by the host only through fds checked not to be a symlink,
// hardlink, FIFO or directory it planted (files.go).
//
// The package owns the ids, the cgroups, the jail init and the log
// copier; it does not own the VMM's files (the caller's), nor what the
// VMM does once it runs (QEMU's own seccomp filter is the qemu driver's
// business).
package jail

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Spec is one jailed process.
type Spec struct {
	// Root is an existing directory, private to this VMM, that the jail's
	// root tmpfs is mounted on inside the jail's mount namespace (the host
	// keeps seeing the directory as it is). The VMM's state dir serves.
	Root string
	// Files are bound into the root, each at /<Name>.
	Files []File
	// Devices are host device nodes bound in at the same path (/dev/kvm).
	// The process keeps each one's group as a supplementary group when the
	// group may read and write it (Debian's /dev/kvm is root:kvm 0660), so
	// an unprivileged VMM can open it; a device only root may open stays
	// closed to it.
	Devices []string
	// Own lists host files the VMM writes: they are chowned to its id and
	// made 0600 before it starts, through an fd (OpenOwn): each must be a
	// regular file with one link, owned by root or a previous VMM.
	Own []string

	// Path is the program, a path under /usr (the only tree in view).
	Path string
	// Args is the full argv, Args[0] included.
	Args []string
	// ExtraFiles become fds 3, 4, ... of the program, in order.
	ExtraFiles []*os.File
	// NetNS, when set, is the network namespace the process runs in (a
	// VMM that opens its tap by name, as Firecracker does); otherwise it
	// gets a new, empty one.
	NetNS *os.File
	// Record, when set, is called once the jailed process exists and
	// before it may run the program: the caller records the pid (and
	// State) where a later worker process will look for it. The program
	// runs only after Record returned nil; if Record fails, or the caller
	// dies before it returns, the process exits without running it, so a
	// crash of the caller can never leave a VMM nobody knows of.
	Record func(pid int, startTime uint64, st State) error
	Stdout *os.File
	Stderr *os.File
	// Logs are the bounded logs the program writes (log.go): Start starts
	// their copier before the program may run, and gives FIFO logs to the
	// program's uid. The caller hands the program their Writers (Stdout,
	// Stderr, ExtraFiles) and closes the Logs once Start returned.
	Logs []*Log

	Limits Limits
}

// File is a host file bound into the jail's root.
type File struct {
	Name     string // name in the root, without slashes
	Source   string // host path
	Writable bool
}

// Limits are the jail's resource limits.
type Limits struct {
	MemoryBytes int64   // memory.max
	PIDs        int     // pids.max (threads count)
	CPUs        float64 // cpu.max, in CPUs
	IOWeight    int     // io weight, 1..10000 (100 is the default)
	NoFile      uint64  // RLIMIT_NOFILE
}

// State is what a caller records to find a jail again after a restart.
type State struct {
	UID     int      `json:"uid"`
	GID     int      `json:"gid"`
	Cgroups []string `json:"cgroups"`
	// LogCopier is the copier of the jail's logs (absent without logs, and
	// in records of workers that ran before the copier): Release waits for
	// it, so that no file of the jail is held open once it is released.
	LogCopier *Process `json:"log_copier,omitempty"`
}

// Jail is a started jailed process.
type Jail struct {
	Cmd   *exec.Cmd
	State State
	// LogsDone closes when the log copier has exited (nil without Logs):
	// after the program, once it has saved what the program wrote last.
	LogsDone <-chan struct{}
}

const (
	initArg0  = "space-jail-init"
	envConfig = "SPACE_JAIL_CONFIG"
)

// config is what Start hands the jail init (in its environment).
type config struct {
	Root    string   `json:"root"`
	Files   []File   `json:"files"`
	Devices []string `json:"devices"`
	Cgroups []string `json:"cgroups"`
	UID     int      `json:"uid"`
	NoFile  uint64   `json:"nofile"`
	Path    string   `json:"path"`
	Args    []string `json:"args"`
	// GateFD is the read end of the start gate: the init runs the program
	// only after reading a byte from it (EOF: the caller is gone).
	GateFD int `json:"gate_fd"`
	// NetNSFD, when above 0, is a network namespace to join.
	NetNSFD int `json:"netns_fd,omitempty"`
	// Groups are the supplementary groups the program keeps (those of
	// its devices).
	Groups []uint32 `json:"groups,omitempty"`
}

// Start starts spec's program in a new jail. The caller waits for
// Jail.Cmd and calls State.Release once the process is gone.
func Start(spec Spec) (_ *Jail, err error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("jail: starting a VMM jail needs root: %w", errdefs.ErrFailedPrecondition)
	}
	if spec.Limits.NoFile == 0 {
		spec.Limits.NoFile = 1024
	}
	if spec.Limits.IOWeight == 0 {
		spec.Limits.IOWeight = 100
	}
	if need := uint64(len(spec.ExtraFiles) + 3 + 64); spec.Limits.NoFile < need {
		spec.Limits.NoFile = need
	}
	for _, f := range spec.Files {
		if f.Name == "" || filepath.Base(f.Name) != f.Name || f.Name == "usr" || f.Name == "dev" {
			return nil, fmt.Errorf("jail: file name %q: %w", f.Name, errdefs.ErrInvalidArgument)
		}
	}
	id, err := allocID()
	if err != nil {
		return nil, err
	}
	st := State{UID: id, GID: id}
	defer func() {
		if err != nil {
			if st.LogCopier != nil {
				st.LogCopier.waitGone(0) // the program never ran: nothing to save
			}
			st.Release()
		}
	}()
	if st.Cgroups, err = makeCgroups(id, spec.Limits); err != nil {
		return nil, err
	}
	for _, p := range spec.Own {
		// By fd, never by path: a symlink or a hardlink where the file
		// should be would have root chown what it points at (files.go).
		f, err := OpenOwn(p, os.O_RDONLY)
		if err != nil {
			return nil, err
		}
		err = Give(f, id)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	var logsDone <-chan struct{}
	if len(spec.Logs) > 0 {
		for _, l := range spec.Logs {
			if l.fifo {
				if err := Give(l.in, id); err != nil {
					return nil, err
				}
			}
		}
		// Before the program: it may write as soon as it runs. Should the
		// program not start, the copier ends when the caller closes its
		// logs.
		copier, err := StartLogCopier(spec.Root, spec.Logs)
		if err != nil {
			return nil, err
		}
		logsDone, st.LogCopier = copier.Done, &copier.Process
	}
	gateR, gateW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("jail: start gate: %w: %v", errdefs.ErrInternal, err)
	}
	defer gateR.Close()
	defer gateW.Close()
	// The gate and the namespace come after the caller's files, whose fd
	// numbers the program's arguments name.
	extra := append(append([]*os.File(nil), spec.ExtraFiles...), gateR)
	c := config{
		Root: spec.Root, Files: spec.Files, Devices: spec.Devices, Cgroups: st.Cgroups,
		UID: id, NoFile: spec.Limits.NoFile, Path: spec.Path, Args: spec.Args,
		GateFD: 3 + len(extra) - 1, Groups: deviceGroups(spec.Devices),
	}
	cloneflags := uintptr(syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS)
	if spec.NetNS != nil {
		extra = append(extra, spec.NetNS)
		c.NetNSFD = 3 + len(extra) - 1
		cloneflags &^= syscall.CLONE_NEWNET
	}
	cfg, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("jail: %w: %v", errdefs.ErrInternal, err)
	}
	cmd := &exec.Cmd{
		// The running binary, even if replaced on disk since.
		Path:       "/proc/self/exe",
		Args:       []string{initArg0, spec.Root},
		Env:        []string{envConfig + "=" + string(cfg)},
		Dir:        "/",
		Stdout:     spec.Stdout,
		Stderr:     spec.Stderr,
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			// Own process group so a signal to the worker's group misses
			// it; no Pdeathsig: a VMM outlives its worker to be adopted.
			Setpgid:    true,
			Cloneflags: cloneflags,
		},
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("jail: start: %w: %v", errdefs.ErrInternal, err)
	}
	gateR.Close()
	pid := cmd.Process.Pid
	start, err := StartTime(pid)
	if err == nil {
		_ = recordID(id, pid, start, st.Cgroups)
		if spec.Record != nil {
			err = spec.Record(pid, start, st)
		}
	}
	if err != nil {
		// Not running the program yet: the gate is still shut.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("jail: record the process: %w", err)
	}
	if _, err := gateW.Write([]byte{1}); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("jail: open the start gate: %w: %v", errdefs.ErrInternal, err)
	}
	return &Jail{Cmd: cmd, State: st, LogsDone: logsDone}, nil
}

// Release waits for the jail's log copier to end (bounded), removes the
// jail's cgroups and frees its id. Call it only once the jailed process is
// gone; safe to call twice.
func (s State) Release() {
	if s.LogCopier != nil {
		s.LogCopier.waitGone(copierExitWait)
	}
	if s.UID == 0 {
		return
	}
	for _, d := range s.Cgroups {
		_ = removeCgroup(d)
	}
	releaseID(s.UID)
}

// Kill SIGKILLs everything in the jail's cgroups. A jail init joins them
// first thing, but one that has only just started may not have yet: the
// caller also kills its process (group) by pid, which it knows is not
// reused (it is the child's parent, or it checked the start time).
func (s State) Kill() { killCgroups(s.Cgroups) }

// OOMKilled reports whether the jail's memory limit killed a process.
func (s State) OOMKilled() bool { return oomKills(s.Cgroups) > 0 }

// PeakMemory is the most memory the jail has been charged, in bytes.
func (s State) PeakMemory() int64 { return peakMemory(s.Cgroups) }

// Limits reads back the limits the jail's cgroups enforce.
func (s State) Limits() (Limits, error) { return readLimits(s.Cgroups) }

// deviceGroups are the groups of devs that may read and write them, other
// than root's (which a VMM must never have).
func deviceGroups(devs []string) []uint32 {
	var out []uint32
	for _, d := range devs {
		var st syscall.Stat_t
		if syscall.Stat(d, &st) != nil || st.Gid == 0 || st.Mode&0o060 != 0o060 {
			continue
		}
		out = append(out, st.Gid)
	}
	return out
}
