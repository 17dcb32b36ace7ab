package agent

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// cgroups puts each process in its own cgroup v2 under root so the agent can
// tell an OOM kill from any other SIGKILL and can kill everything a command
// left behind, setsid or not. root itself is the one parent of every user
// command and carries the limits for all of them together; the agent stays
// outside it (in the root cgroup), so no guest load can take the memory,
// the pids or the CPU the agent and its link need. Without a writable
// cgroup2 mount (or with root == "") it is disabled and processes run where
// the agent runs.
type cgroups struct {
	root string
	// perCommandPids bounds one command's cgroup to half the shared bound,
	// so a fork bomb in one command leaves room for the others and for new
	// ones (a check, a kill).
	perCommandPids int
	n              atomic.Uint64
}

// Reserves kept out of the commands' reach, for the agent, its link and the
// kernel: memory (reserveMem plus a sixteenth of the guest: a booted guest
// already uses about 32 MiB outside the commands, and some of the kernel's
// memory per task is charged to no cgroup) and tasks (threads-max counts
// the agent's threads and kernel threads too). Tasks are also bounded by
// the guest's size, pidsPerMiB, as each costs kernel memory.
const (
	reserveMem     = 64 << 20
	reservePids    = 128
	pidsPerMiB     = 4
	minCommandPids = 64
	// commandsCPUWeight is the commands' share against the agent's threads,
	// which run in the root cgroup at the default weight of a nice-0 task
	// each (100 here is the default; lower means the agent wins under load).
	commandsCPUWeight = 20
)

func newCgroups(root string, log *slog.Logger) *cgroups {
	if root == "" {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(root), &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		log.Info("cgroup v2 not available; per-process cgroups disabled", "dir", filepath.Dir(root))
		return nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		log.Warn("per-process cgroups disabled", "err", err)
		return nil
	}
	// Best effort, one controller at a time (one missing controller must not
	// keep the others off): memory for limits and OOM accounting, pids for
	// the task bound, cpu for the agent's precedence.
	for _, ctl := range []string{"+memory", "+pids", "+cpu"} {
		_ = os.WriteFile(filepath.Join(filepath.Dir(root), "cgroup.subtree_control"), []byte(ctl), 0)
	}
	// Each command its own share of the commands' CPU too: a command that
	// forks without end must not starve the next one (a kill, a check).
	for _, ctl := range []string{"+memory", "+pids", "+cpu"} {
		_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte(ctl), 0)
	}
	c := &cgroups{root: root}
	lim := commandLimits()
	set := func(file, val string) {
		if err := os.WriteFile(filepath.Join(root, file), []byte(val), 0); err != nil {
			log.Warn("command cgroup limit", "file", file, "err", err)
		}
	}
	if lim.memory > 0 {
		set("memory.max", strconv.FormatInt(lim.memory, 10))
		// Memory the commands cannot get back: swap (there is none by
		// default) must not become a way round memory.max.
		_ = os.WriteFile(filepath.Join(root, "memory.swap.max"), []byte("0"), 0)
	}
	if lim.pids > 0 {
		set("pids.max", strconv.Itoa(lim.pids))
		c.perCommandPids = max(lim.pids/2, minCommandPids)
	}
	_ = os.WriteFile(filepath.Join(root, "cpu.weight"), []byte(strconv.Itoa(commandsCPUWeight)), 0)
	log.Info("command cgroup limits", "memory_max", lim.memory, "pids_max", lim.pids, "per_command_pids", c.perCommandPids)
	return c
}

type limits struct {
	memory int64 // bytes, 0 = unknown
	pids   int
}

// commandLimits derives the shared bounds from the guest's size.
func commandLimits() limits {
	var total int64
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		total = int64(si.Totalram) * int64(si.Unit)
	}
	threadsMax := 0
	if b, err := os.ReadFile("/proc/sys/kernel/threads-max"); err == nil {
		threadsMax, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return limitsFor(total, threadsMax)
}

// limitsFor computes the bounds for a guest of total bytes of memory and
// the kernel's threads-max (0 = unknown).
func limitsFor(total int64, threadsMax int) limits {
	var l limits
	if total > 0 {
		l.memory = max(total-reserveMem-total/16, total/2)
		l.pids = int(total>>20) * pidsPerMiB
	}
	if threadsMax > 0 && (l.pids == 0 || threadsMax-reservePids < l.pids) {
		l.pids = threadsMax - reservePids
	}
	if l.pids != 0 {
		l.pids = max(l.pids, minCommandPids)
	}
	return l
}

type cgroup struct {
	dir       string
	fd        int
	closeOnce sync.Once // remove may run twice (exit, then a kill of leftovers)
}

// create makes a fresh cgroup; the caller starts the process into it with
// SysProcAttr.UseCgroupFD.
func (c *cgroups) create() (*cgroup, error) {
	if c == nil {
		return nil, nil
	}
	dir := filepath.Join(c.root, "p"+strconv.FormatUint(c.n.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return nil, err
	}
	if c.perCommandPids > 0 {
		_ = os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(c.perCommandPids)), 0)
	}
	// An OOM kill takes the whole command, not one of its processes: what
	// is left of a command after losing a random process is seldom of use,
	// and a fork bomb that reaches the memory bound is gone at once.
	_ = os.WriteFile(filepath.Join(dir, "memory.oom.group"), []byte("1"), 0)
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	return &cgroup{dir: dir, fd: fd}, nil
}

// oomKilled reports whether the kernel OOM-killed anything in the cgroup.
func (g *cgroup) oomKilled() bool {
	if g == nil {
		return false
	}
	f, err := os.Open(filepath.Join(g.dir, "memory.events"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "oom_kill" {
			n, _ := strconv.Atoi(v)
			return n > 0
		}
	}
	return false
}

// kill SIGKILLs every process in the cgroup at once, including those that
// left the command's process group (setsid) and those being forked while
// it runs, which a process-group kill misses. It reports false when the
// kernel cannot (no cgroup, or a kernel before cgroup.kill).
func (g *cgroup) kill() bool {
	if g == nil {
		return false
	}
	return os.WriteFile(filepath.Join(g.dir, "cgroup.kill"), []byte("1"), 0) == nil
}

// populated reports whether any process is left in the cgroup.
func (g *cgroup) populated() bool {
	if g == nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.events"))
	return err == nil && strings.Contains(string(b), "populated 1")
}

// removeWhenEmpty removes the cgroup once its killed processes are gone
// (they die at once, but are reaped a moment later).
func (g *cgroup) removeWhenEmpty() {
	for range 100 {
		if !g.populated() {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.remove()
}

// remove deletes the cgroup; it fails harmlessly while processes remain.
func (g *cgroup) remove() {
	if g == nil {
		return
	}
	g.closeOnce.Do(func() { _ = unix.Close(g.fd) })
	_ = os.Remove(g.dir)
}
