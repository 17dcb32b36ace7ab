package agent

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// cgroups puts each process in its own cgroup v2 under root so the agent can
// tell an OOM kill from any other SIGKILL. Without a writable cgroup2 mount
// (or with root == "") it is disabled and processes run where the agent runs.
type cgroups struct {
	root string
	n    atomic.Uint64
}

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
	// Best effort: memory for OOM accounting, pids for group kills.
	for _, dir := range []string{filepath.Dir(root), root} {
		for _, ctl := range []string{"+memory", "+pids"} {
			_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(ctl), 0)
		}
	}
	return &cgroups{root: root}
}

type cgroup struct {
	dir string
	fd  int
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

// remove deletes the cgroup; it fails harmlessly while processes remain.
func (g *cgroup) remove() {
	if g == nil {
		return
	}
	if g.fd >= 0 {
		_ = unix.Close(g.fd)
		g.fd = -1
	}
	_ = os.Remove(g.dir)
}
