package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/server"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// Every worker is a Ready node labelled and tainted as a worker, whose
// InternalIP and port annotation are its worker-protocol address.
func TestWorkersAreNodes(t *testing.T) {
	if len(cl.Info.Workers) != workerCount {
		t.Fatalf("cluster.json lists %d workers, want %d", len(cl.Info.Workers), workerCount)
	}
	for _, w := range cl.Info.Workers {
		n, err := cl.Kube().CoreV1().Nodes().Get(context.Background(), w.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("node %s: %v", w.Name, err)
		}
		host, port, _ := net.SplitHostPort(w.Address)
		ip := ""
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
			}
		}
		tainted := false
		for _, tn := range n.Spec.Taints {
			tainted = tainted || (tn.Key == k8s.TaintSandbox && tn.Effect == corev1.TaintEffectNoSchedule)
		}
		if ip != host || n.Annotations[k8s.AnnotationWorkerPort] != port || n.Labels[k8s.LabelWorker] != "true" || !tainted {
			t.Errorf("node %s: InternalIP %q port %q labels %v taints %v; want the worker at %s",
				w.Name, ip, n.Annotations[k8s.AnnotationWorkerPort], n.Labels, n.Spec.Taints, w.Address)
		}
		// The workers offer 2 vCPUs each, overcommitted by the default ratio.
		if want := int64(2 * server.DefaultVCPUOvercommit); n.Status.Capacity.Cpu().Value() != want || n.Status.Capacity.Pods().Value() != 4 {
			t.Errorf("node %s capacity %v, want %d cpu and 4 pods", w.Name, n.Status.Capacity, want)
		}
	}
}

// A worker-protocol call with a wrong token is refused as unauthenticated,
// with nothing of the worker in the answer, and the worker logs the
// refusal (without the token).
func TestWorkerProtocolRefusesWrongToken(t *testing.T) {
	secret := make([]byte, 32)
	rand.Read(secret)
	wrong, err := remote.NewToken(hex.EncodeToString(secret))
	if err != nil {
		t.Fatal(err)
	}
	w := cl.Info.Workers[0]
	c, err := remote.NewClient(remote.ClientConfig{Address: w.Address, Token: wrong})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := c.Sandboxes(ctx)
	if !errors.Is(err, errdefs.ErrUnauthenticated) || list != nil {
		t.Fatalf("Sandboxes with a wrong token = %v, %v; want unauthenticated and nothing", list, err)
	}
	if strings.Contains(err.Error(), "sbx_") {
		t.Errorf("the refusal names a sandbox: %v", err)
	}
	// The right token is let in (so the refusal was the token's doing).
	if _, err := workerClient(t, 0).Sandboxes(ctx); err != nil {
		t.Fatalf("Sandboxes with the cluster's token: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		b, _ := os.ReadFile(w.Log)
		if !strings.Contains(string(b), "refused a worker protocol call") {
			return errors.New("the worker has not logged the refusal")
		}
		if strings.Contains(string(b), hex.EncodeToString(secret)) {
			t.Fatal("the worker logged the token it was given")
		}
		return nil
	})
}

// Several workers on one host keep to their own: SIGKILL one and start it
// again, and the other's sandbox keeps its VMM, its namespace and its
// Ready Pod, while the restarted worker adopts its own sandbox (same VMM).
func TestWorkerRestartLeavesOthersAlone(t *testing.T) {
	a, b := cl.Info.Workers[0], cl.Info.Workers[1]
	const idA, idB = "sbx_e2eowna", "sbx_e2eownb"
	podA := sandboxPod(t, idA, a.Name)
	podB := sandboxPod(t, idB, b.Name)
	waitPodReady(t, podA.Name)
	waitPodReady(t, podB.Name)
	vmA, vmB := vmmOf(t, 0, idA), vmmOf(t, 1, idB)
	if vmA.State != worker.VMRunning || vmB.State != worker.VMRunning || !processAlive(vmA.VMMPID) || !processAlive(vmB.VMMPID) {
		t.Fatalf("before: %s %+v, %s %+v", a.Name, vmA, b.Name, vmB)
	}
	nsB := namespaceOf(b.DataDir, idB)
	if _, err := os.Stat(nsB); err != nil {
		t.Fatalf("sandbox %s's namespace: %v", idB, err)
	}

	cl.KillWorker(0)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cl.RestartWorker(ctx, 0); err != nil {
		t.Fatal(err)
	}
	waitPodReady(t, podA.Name)

	afterA, afterB := vmmOf(t, 0, idA), vmmOf(t, 1, idB)
	if afterB.VMMPID != vmB.VMMPID || afterB.State != worker.VMRunning || !processAlive(vmB.VMMPID) {
		t.Errorf("%s's sandbox after %s restarted: %+v, was %+v", b.Name, a.Name, afterB, vmB)
	}
	if _, err := os.Stat(nsB); err != nil {
		t.Errorf("%s's namespace after %s restarted: %v", b.Name, a.Name, err)
	}
	if afterA.VMMPID != vmA.VMMPID || afterA.State != worker.VMRunning {
		t.Errorf("%s did not adopt its own sandbox: %+v, was %+v", a.Name, afterA, vmA)
	}
	p, err := cl.Kube().CoreV1().Pods(cl.Info.Namespace).Get(ctx, podB.Name, metav1.GetOptions{})
	if err != nil || !podReady(p) || p.Spec.NodeName != b.Name {
		t.Errorf("%s's pod after %s restarted: %v (err %v)", b.Name, a.Name, p.Status, err)
	}
	deletePods(t, podA.Name, podB.Name)
	testenv.Eventually(t, time.Minute, func() error {
		if processAlive(vmA.VMMPID) || processAlive(vmB.VMMPID) {
			return errors.New("a deleted sandbox's VMM still runs")
		}
		return nil
	})
}

// namespaceOf is the path of sandbox id's network namespace on the worker
// with data dir dataDir.
func namespaceOf(dataDir, id string) string {
	nm := network.New(context.Background(), network.Config{Instance: dataDir, PoolSize: -1})
	defer nm.Close(context.Background())
	return network.NamespacePath(nm.NameOf(id))
}
