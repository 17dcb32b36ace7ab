package jail

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Each jail has a cgroup named by its id under a parent named cgroupParent.
// On a cgroup v2 host (Debian 12 with systemd) that is one directory,
// /sys/fs/cgroup/space-vmm/<id>, beside systemd's tree as Firecracker's
// jailer does (a child of the worker's own cgroup could not have
// controllers while the worker's cgroup holds the worker). On a cgroup v1
// host (or a hybrid one whose v2 hierarchy has no memory controller, such
// as the machines the tests run on) it is one directory per controller,
// under the cgroup the worker itself runs in, so the VMMs stay inside
// whatever limits and accounting the worker is under.
const cgroupParent = "space-vmm"

var cgroupRoot = "/sys/fs/cgroup"

// v1Controllers are the v1 hierarchies a jail joins; io is optional.
var v1Controllers = []string{"memory", "pids", "cpu", "blkio"}

const cpuPeriod = 100000 // µs

func isV2() bool {
	b, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
	if err != nil {
		return false
	}
	have := strings.Fields(string(b))
	return contains(have, "memory") && contains(have, "pids")
}

func exists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// cgroupParents lists the directories the jails' cgroups are made in.
func cgroupParents() []string {
	if isV2() {
		return []string{filepath.Join(cgroupRoot, cgroupParent)}
	}
	own := ownV1Cgroups()
	var out []string
	for _, c := range v1Controllers {
		mnt := filepath.Join(cgroupRoot, c)
		if _, err := os.Stat(filepath.Join(mnt, "cgroup.procs")); err != nil {
			continue
		}
		// Joining a v1 hierarchy costs a migration (an RCU grace period)
		// on every start: skip blkio where it offers no weight to set.
		if c == "blkio" && !exists(mnt, "blkio.weight") && !exists(mnt, "blkio.bfq.weight") {
			continue
		}
		out = append(out, filepath.Join(mnt, own[c], cgroupParent))
	}
	return out
}

func cgroupDirs(id int) []string {
	var out []string
	for _, p := range cgroupParents() {
		out = append(out, filepath.Join(p, strconv.Itoa(id)))
	}
	return out
}

// ownV1Cgroups maps each v1 controller to this process's cgroup in it.
func ownV1Cgroups() map[string]string {
	m := map[string]string{}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || parts[1] == "" {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			m[c] = parts[2]
		}
	}
	return m
}

// makeCgroups creates the jail's cgroups and sets their limits.
func makeCgroups(id int, l Limits) (dirs []string, err error) {
	defer func() {
		if err != nil {
			for _, d := range dirs {
				_ = removeCgroup(d)
			}
			dirs = nil
		}
	}()
	v2 := isV2()
	if v2 {
		if err := enableV2(); err != nil {
			return nil, err
		}
	}
	parents := cgroupParents()
	if len(parents) == 0 {
		return nil, fmt.Errorf("jail: no cgroup hierarchy with a memory controller: %w", errdefs.ErrFailedPrecondition)
	}
	for _, p := range parents {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return dirs, fmt.Errorf("jail: cgroup parent: %w: %v", errdefs.ErrInternal, err)
		}
		d := filepath.Join(p, strconv.Itoa(id))
		if err := os.Mkdir(d, 0o755); err != nil {
			return dirs, fmt.Errorf("jail: cgroup: %w: %v", errdefs.ErrInternal, err)
		}
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := setLimits(d, v2, l); err != nil {
			return dirs, err
		}
	}
	return dirs, nil
}

// enableV2 turns the controllers on for the jails' parent (and its parent,
// the root, where systemd usually has them on already).
func enableV2() error {
	parent := filepath.Join(cgroupRoot, cgroupParent)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("jail: cgroup parent: %w: %v", errdefs.ErrInternal, err)
	}
	for _, dir := range []string{cgroupRoot, parent} {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		on, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		for _, c := range []string{"memory", "pids", "cpu", "io"} {
			if !contains(strings.Fields(string(b)), c) || contains(strings.Fields(string(on)), c) {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0); err != nil && c != "io" {
				return fmt.Errorf("jail: enable cgroup controller %s: %w: %v", c, errdefs.ErrFailedPrecondition, err)
			}
		}
	}
	return nil
}

func setLimits(dir string, v2 bool, l Limits) error {
	quota := int64(l.CPUs * cpuPeriod)
	var writes [][2]string // file, value; a missing optional file is skipped
	if v2 {
		writes = [][2]string{
			{"memory.max", strconv.FormatInt(l.MemoryBytes, 10)},
			{"?memory.swap.max", "0"},
			{"pids.max", strconv.Itoa(l.PIDs)},
			{"cpu.max", fmt.Sprintf("%d %d", quota, cpuPeriod)},
			{"?io.weight", "default " + strconv.Itoa(l.IOWeight)},
		}
	} else {
		writes = [][2]string{
			{"?memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)},
			{"?memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)},
			{"?pids.max", strconv.Itoa(l.PIDs)},
			{"?cpu.cfs_period_us", strconv.Itoa(cpuPeriod)},
			{"?cpu.cfs_quota_us", strconv.FormatInt(quota, 10)},
			{"?blkio.weight", strconv.Itoa(l.IOWeight)},
			{"?blkio.bfq.weight", strconv.Itoa(l.IOWeight)},
		}
	}
	for _, w := range writes {
		name, optional := strings.CutPrefix(w[0], "?")
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); optional && err != nil {
			continue
		}
		if err := os.WriteFile(p, []byte(w[1]), 0); err != nil {
			return fmt.Errorf("jail: cgroup %s: %w: %v", name, errdefs.ErrInternal, err)
		}
	}
	return nil
}

// readLimits reads back what the cgroups enforce; fields a host does not
// offer (io weight on v1 without a weight-aware scheduler) stay zero.
func readLimits(dirs []string) (Limits, error) {
	var l Limits
	read := func(d, name string) (string, bool) {
		b, err := os.ReadFile(filepath.Join(d, name))
		return strings.TrimSpace(string(b)), err == nil
	}
	for _, d := range dirs {
		if v, ok := read(d, "memory.max"); ok {
			l.MemoryBytes, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := read(d, "memory.limit_in_bytes"); ok {
			l.MemoryBytes, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := read(d, "pids.max"); ok {
			l.PIDs, _ = strconv.Atoi(v)
		}
		if v, ok := read(d, "cpu.max"); ok {
			var q, p float64
			if _, err := fmt.Sscanf(v, "%f %f", &q, &p); err == nil && p > 0 {
				l.CPUs = q / p
			}
		}
		if v, ok := read(d, "cpu.cfs_quota_us"); ok {
			q, _ := strconv.ParseFloat(v, 64)
			p, _ := read(d, "cpu.cfs_period_us")
			if pf, _ := strconv.ParseFloat(p, 64); pf > 0 && q > 0 {
				l.CPUs = q / pf
			}
		}
		if v, ok := read(d, "io.weight"); ok {
			_, _ = fmt.Sscanf(v, "default %d", &l.IOWeight)
		}
		for _, f := range []string{"blkio.weight", "blkio.bfq.weight"} {
			if v, ok := read(d, f); ok {
				l.IOWeight, _ = strconv.Atoi(strings.Fields(v + " 0")[0])
			}
		}
	}
	if l.MemoryBytes == 0 {
		return l, fmt.Errorf("jail: no memory cgroup: %w", errdefs.ErrNotFound)
	}
	return l, nil
}

// oomKills counts the processes the memory limit killed.
func oomKills(dirs []string) int {
	for _, d := range dirs {
		for _, f := range []string{"memory.events", "memory.oom_control"} {
			b, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
					n, _ := strconv.Atoi(strings.TrimSpace(v))
					return n
				}
			}
		}
	}
	return 0
}

// peakMemory is the most memory the jail's cgroup has been charged.
func peakMemory(dirs []string) int64 {
	for _, d := range dirs {
		for _, f := range []string{"memory.peak", "memory.max_usage_in_bytes"} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				return n
			}
		}
	}
	return 0
}

// killCgroups SIGKILLs everything in the jail's cgroups.
func killCgroups(dirs []string) {
	for _, d := range dirs {
		if os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0) == nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// removeCgroup removes an empty cgroup; an exited VMM can linger in it for
// a moment, so EBUSY is retried briefly.
func removeCgroup(dir string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
