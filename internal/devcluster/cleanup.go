package devcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/jail"
	"github.com/space-sandbox/space/internal/network"
)

// made are the names Start creates in Dir; Stop and Down remove exactly these.
var made = []string{"kube", "s3", "w", "controls", "logs", "s3.credentials", "worker.token", "admin.key",
	InfoFile + ".tmp", InfoFile}

// launcherLog is cmd/space-cluster's own log in Dir: Down removes it (the
// launcher cannot: its failure is written there).
const launcherLog = "space-cluster.log"

// Stop ends the cluster and removes what it made: the controls first, then
// every sandbox Pod (so each worker deletes its VMs), the workers, what a
// dead worker left on the host, the servers, and the files in Dir.
func (c *Cluster) Stop() error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	var errs []error
	parallel(c.controls, (*process).stop)
	if c.kube != nil {
		errs = append(errs, c.deleteSandboxPods())
	}
	parallel(c.workers, (*process).stop)
	for _, p := range c.workers {
		errs = append(errs, cleanWorkerHost(p.dataDir))
	}
	if c.kube != nil {
		c.kube.Stop()
	}
	if c.s3 != nil {
		errs = append(errs, c.s3.Stop())
	}
	if c.pg != nil {
		errs = append(errs, c.pg.Stop())
	}
	errs = append(errs, removeMade(c.opts.Dir))
	return errors.Join(errs...)
}

func parallel(ps []*process, fn func(*process)) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { fn(p) })
	}
	wg.Wait()
}

// deleteSandboxPods deletes every Pod in the sandbox namespace and waits
// (bounded) until the workers have removed them; what is left then (Pods
// of a dead worker's node) is deleted without grace.
func (c *Cluster) deleteSandboxPods() error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pods := c.kube.Client.CoreV1().Pods(c.opts.Namespace)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("delete sandbox pods: %w", err)
	}
	force := time.Now().Add(45 * time.Second)
	for {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list sandbox pods: %w", err)
		}
		if len(list.Items) == 0 {
			return nil
		}
		if time.Now().After(force) {
			zero := int64(0)
			for _, p := range list.Items {
				_ = pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox pods still there: %d", len(list.Items))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// cleanWorkerHost removes what a worker with data dir dir may have left on
// the host: its VMMs (found by the data dir in their command line), their
// jail ids and cgroups, its network namespaces (its own instance prefix
// only), the mounts under dir (the reflink volume, whose loop device
// detaches with it) and dir itself.
func cleanWorkerHost(dir string) error {
	var errs []error
	for _, pid := range processesUnder(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		errs = append(errs, waitGone(pid, 15*time.Second))
	}
	jail.Sweep()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nm := network.New(ctx, network.Config{Instance: dir, PoolSize: -1})
	_, err := nm.ReapOrphans(ctx, func(string) bool { return false })
	errs = append(errs, err, nm.Close(ctx))
	for _, m := range mountsUnder(dir) {
		if out, err := exec.CommandContext(ctx, "umount", m).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("umount %s: %v: %s", m, err, bytes.TrimSpace(out)))
		}
	}
	if len(mountsUnder(dir)) == 0 {
		errs = append(errs, os.RemoveAll(dir))
	}
	return errors.Join(errs...)
}

// processesUnder lists the processes (other than this one) whose command
// line names a path under dir.
func processesUnder(dir string) []int {
	var out []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		pid, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(p, "/proc/"), "/cmdline"))
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(dir+"/")) && pidAlive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// mountsUnder lists the mount points under dir, deepest first.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func removeMade(dir string) error {
	var errs []error
	for _, name := range made {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			errs = append(errs, err)
		}
	}
	_ = os.Remove(dir) // only when empty: Dir may hold the caller's files too
	return errors.Join(errs...)
}

// Down stops the cluster recorded in dir's cluster.json: it asks the
// launcher to stop (SIGTERM: it then does what Stop does) and waits for
// it; whatever still runs after that (a launcher that was killed) is
// SIGKILLed by the PIDs in the file, and what its workers left on the host
// and the files are removed.
func Down(dir string, progress io.Writer) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	info, err := ReadInfo(dir)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(progress, "space-cluster: no cluster in %s (no %s)\n", dir, InfoFile)
		return nil
	}
	if err != nil {
		return err
	}
	if ours(info.Supervisor, dir) {
		fmt.Fprintf(progress, "space-cluster: stopping the cluster (launcher pid %d)\n", info.Supervisor)
		_ = syscall.Kill(info.Supervisor, syscall.SIGTERM)
		if err := waitGone(info.Supervisor, 5*time.Minute); err != nil {
			fmt.Fprintf(progress, "space-cluster: %v; killing it\n", err)
			_ = syscall.Kill(info.Supervisor, syscall.SIGKILL)
			_ = waitGone(info.Supervisor, 10*time.Second)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, InfoFile)); errors.Is(err, fs.ErrNotExist) {
		_ = os.Remove(filepath.Join(dir, launcherLog))
		_ = os.Remove(dir)
		return nil // the launcher cleaned up
	}
	fmt.Fprintln(progress, "space-cluster: the launcher did not finish; stopping what is left by PID")
	type victim struct {
		pid   int
		match string
	}
	var left []victim
	for _, p := range info.Controls {
		left = append(left, victim{p.PID, dir})
	}
	for _, p := range info.Workers {
		left = append(left, victim{p.PID, dir})
	}
	for _, s := range info.Servers {
		left = append(left, victim{s.PID, s.Match})
	}
	for _, v := range left {
		if ours(v.pid, v.match) {
			_ = syscall.Kill(v.pid, syscall.SIGKILL)
			_ = waitGone(v.pid, 15*time.Second)
		}
	}
	var errs []error
	for _, w := range info.Workers {
		errs = append(errs, cleanWorkerHost(w.DataDir))
	}
	for _, s := range info.Servers {
		if s.Dir != "" {
			errs = append(errs, os.RemoveAll(s.Dir))
		}
	}
	_ = os.Remove(filepath.Join(dir, launcherLog))
	return errors.Join(append(errs, removeMade(dir))...)
}

// ours reports whether pid runs with match in its command line (so a PID
// the kernel has given to some other process since is left alone).
func ours(pid int, match string) bool {
	if !pidAlive(pid) || match == "" {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && bytes.Contains(b, []byte(match))
}
