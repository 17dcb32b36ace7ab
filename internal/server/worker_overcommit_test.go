package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/testenv/kuberig"
	"github.com/space-sandbox/space/internal/worker"
)

// TestWorkerVCPUOvercommit: `make cluster`'s fleet shape — three workers
// started with --vcpus 2 and no --vcpu-overcommit — advertises 2 × 4 cpu
// per node (memory as given), and kube-scheduler places twelve 1-vCPU
// sandbox Pods on it, none left pending. Bad ratios are refused.
func TestWorkerVCPUOvercommit(t *testing.T) {
	for _, bad := range []string{"0.5", "17", "x"} {
		if _, err := ParseWorkerFlags([]string{"--kubeconfig", "/k", "--vcpu-overcommit", bad}); err == nil ||
			(bad != "x" && !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Errorf("--vcpu-overcommit %s: %v, want refused", bad, err)
		}
	}
	rig := kuberig.Start(t, kuberig.Options{})
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 3)
	t.Cleanup(func() {
		stop()
		for range 3 {
			select {
			case <-served:
			case <-time.After(30 * time.Second):
				t.Error("a worker did not stop 30s after its ctx ended")
				return
			}
		}
	})
	for i := range 3 {
		cfg, err := ParseWorkerFlags([]string{"--kubeconfig", rig.Kubeconfig, "--node-name", fmt.Sprintf("space-oc-%d", i),
			"--vcpus", "2", "--memory-mib", "2048", "--sandboxes", "8", "--node-lease", "8s"})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			served <- serveWorkerAndNode(ctx, apitest.NewWorker(t), ln, WorkerServing{Token: testToken(t)}, cfg.Node)
		}()
	}
	nodes := rig.Client.CoreV1().Nodes()
	testenv.Eventually(t, time.Minute, func() error {
		for i := range 3 {
			n, err := nodes.Get(ctx, fmt.Sprintf("space-oc-%d", i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !k8s.NodeReady(n) {
				return fmt.Errorf("node %s not Ready", n.Name)
			}
			if cpu, mem := n.Status.Allocatable.Cpu().MilliValue(), n.Status.Allocatable.Memory().Value(); cpu != 8000 || mem != 2048<<20 {
				t.Fatalf("node %s allocatable cpu %dm memory %d; want 8000m (2 vCPUs × 4) and 2048 MiB", n.Name, cpu, mem)
			}
		}
		return nil
	})
	if _, err := rig.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k8s.DefaultNamespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pods := rig.Client.CoreV1().Pods(k8s.DefaultNamespace)
	var names []string
	for i := range 12 {
		pod, err := k8s.SandboxPod(worker.SandboxSpec{ID: fmt.Sprintf("sbx_oc_%d", i), Template: "base", VCPUs: 1, MemoryMiB: 256},
			k8s.PodOptions{Namespace: k8s.DefaultNamespace})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, pod.Name)
	}
	testenv.Eventually(t, 2*time.Minute, func() error {
		pending := 0
		var why string
		for _, n := range names {
			p, err := pods.Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Spec.NodeName == "" {
				pending++
				why, _ = k8s.Unschedulable(p)
			}
		}
		if pending > 0 {
			return fmt.Errorf("%d of 12 sandbox pods not placed (%s)", pending, why)
		}
		return nil
	})
}
