// Package cluster is the e2e suite of cluster mode: real `spaced worker`
// (and `spaced control`) processes with real QEMU VMs, a real Kubernetes
// control plane, PostgreSQL and SeaweedFS, all started once for the whole
// suite by internal/devcluster (the launcher `make cluster` uses) in a
// temp dir on free ports: three workers, each a node, with short node
// lifecycle timings (node Lease 4s, node-monitor grace 8s). At the end
// the cluster is stopped and nothing it made may remain (VMMs, mounts,
// loop devices and processes under its dir, the workers' network
// namespaces).
//
// Adding a case: write a TestXxx in a file of its own that uses the
// shared cluster `cl` (and the helpers in helpers_test.go: sandboxPod,
// waitPodReady, workerClient, vmmOf, deletePods). Keep apart from other
// cases by sandbox ids of your own (each case its own id prefix); leave
// nothing behind (delete your Pods/sandboxes in t.Cleanup), because the
// cluster is shared and the leak check runs after the last case. A case
// that kills a worker restarts it before it ends (cl.RestartWorker). Use
// the base template, 1 vCPU and 256 MiB: every TCG boot costs seconds.
package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/devcluster"
	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker"
)

// cl is the suite's one cluster, started by TestMain.
var cl *devcluster.Cluster

// Suite timings: short, so a dead worker's node reads NotReady in seconds.
const (
	nodeLease = 4 * time.Second
	nodeGrace = 8 * time.Second
	// podToleration is the sandbox Pods' tolerationSeconds for a
	// not-ready node: a dead worker's sandboxes fail about nodeGrace +
	// podToleration after its last Lease renewal.
	podToleration = 5
	workerCount   = 3
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e/cluster: must run as root (loop mounts, VMs, network namespaces); make test does")
		return 1
	}
	bin, err := os.MkdirTemp("", "space-e2e-cluster-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(bin)
	if err := build(bin); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/cluster:", err)
		return 1
	}
	// A short dir: a VM's sockets live under <dir>/w/<n>/…/sandboxes/<id>/,
	// and a unix socket path holds at most 107 bytes.
	dir, err := os.MkdirTemp("", "sc-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	cl, err = devcluster.Start(ctx, devcluster.Options{
		Dir: dir, Spaced: filepath.Join(bin, "spaced"), ModuleRoot: moduleRoot(),
		ControlAddrs: []string{"127.0.0.1:0", "127.0.0.1:0"},
		Workers:      workerCount, WorkerVCPUs: 2, WorkerMemoryMiB: 2048, WorkerSandboxes: 4,
		NodeLease: nodeLease, NodeMonitorGracePeriod: nodeGrace,
		// No warm pools: six idle restored VMs would only load 2 cores.
		// (The egress tests' upstreams are in the benchmarking range,
		// private: allowed as an operator would a lab network.)
		WorkerArgs: []string{"--accel", "auto", "--pool-size", "0", "--egress-allow-private", "198.18.0.0/15"},
		ControlArgs: []string{"--schedule-timeout", scheduleTimeout.String(), "--operation-lease", operationLease.String(),
			"--pod-toleration-seconds", strconv.Itoa(podToleration)},
		Progress: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/cluster:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e/cluster: cluster up in %v\n", time.Since(start).Round(time.Second))
	start = time.Now()
	createAtStart() // fleetready_test.go
	fmt.Fprintf(os.Stderr, "e2e/cluster: a create right after start: HTTP %d, %s %s (%v) in %v\n",
		atStart.code, atStart.op.State, errorOf(atStart.op), atStart.err, time.Since(start).Round(time.Second))
	start = time.Now()
	if err := warmWorkers(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e/cluster: warm-up: %v\nlogs (tails):\n%s", err, cl.LogTails(6000))
		cl.Stop()
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e/cluster: every worker made base's ready snapshot in %v\n", time.Since(start).Round(time.Second))
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e/cluster: logs (tails):\n%s", cl.LogTails(6000))
	}
	workers := cl.Info.Workers
	if err := cl.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/cluster: stop:", err)
		code = 1
	}
	if leaks := leaked(dir, workers); len(leaks) > 0 {
		fmt.Fprintf(os.Stderr, "e2e/cluster: leaked after the suite:\n  %s\n", strings.Join(leaks, "\n  "))
		code = 1
	}
	return code
}

// warmWorkers has every worker make the base template's ready snapshot
// (a cold boot, the slow part of a worker's first sandbox) with one Pod
// pinned to each, so the cases' creates fit --schedule-timeout.
func warmWorkers(ctx context.Context) error {
	pods := cl.Kube().CoreV1().Pods(cl.Info.Namespace)
	var names []string
	for i, w := range cl.Info.Workers {
		pod, err := k8s.SandboxPod(worker.SandboxSpec{ID: fmt.Sprintf("sbx_e2ewarm%d", i), Template: "base", VCPUs: 1, MemoryMiB: 256},
			k8s.PodOptions{Namespace: cl.Info.Namespace})
		if err != nil {
			return err
		}
		pod.Spec.NodeSelector[corev1.LabelHostname] = w.Name
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return err
		}
		names = append(names, pod.Name)
	}
	for _, n := range names {
		for {
			p, err := pods.Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase == corev1.PodFailed {
				return fmt.Errorf("warm-up pod %s failed: %s", n, p.Status.Message)
			}
			if podReady(p) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("warm-up pod %s: %w", n, ctx.Err())
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	for _, n := range names {
		if err := pods.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	for _, n := range names {
		for {
			if _, err := pods.Get(ctx, n, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("warm-up pod %s not deleted: %w", n, ctx.Err())
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return nil
}

// build puts spaced and space-agent into dir.
func build(dir string) error {
	for _, b := range []struct{ out, pkg, cgo string }{
		{"spaced", "./cmd/spaced", "1"}, {"space-agent", "./cmd/space-agent", "0"},
	} {
		// No -trimpath: the build cache of `make build` serves it.
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = moduleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return nil
}

func moduleRoot() string {
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	return root
}

// leaked lists what the cluster left: processes, mounts and loop devices
// under dir (bounded wait: loop devices detach asynchronously), and the
// workers' network namespaces.
func leaked(dir string, workers []devcluster.WorkerInfo) []string {
	deadline := time.Now().Add(time.Minute)
	for {
		leaks := testenv.Leaks(dir)
		for _, w := range workers {
			nm := network.New(context.Background(), network.Config{Instance: w.DataDir, PoolSize: -1})
			prefix := strings.TrimSuffix(nm.NameOf("x"), "x")
			_ = nm.Close(context.Background())
			names, _ := network.ListNamespaces(prefix)
			for _, n := range names {
				leaks = append(leaks, "network namespace "+n+" of "+w.Name)
			}
		}
		if len(leaks) == 0 || time.Now().After(deadline) {
			return leaks
		}
		time.Sleep(200 * time.Millisecond)
	}
}
