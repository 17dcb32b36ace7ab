package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// sandboxPod creates the Pod of a small base-template sandbox, as the
// control plane would; onNode, when set, pins it to that worker node.
// The Pod is deleted when t ends.
func sandboxPod(t *testing.T, id, onNode string) *corev1.Pod {
	t.Helper()
	pod, err := k8s.SandboxPod(worker.SandboxSpec{ID: id, Template: "base", VCPUs: 1, MemoryMiB: 256},
		k8s.PodOptions{Namespace: cl.Info.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	if onNode != "" {
		pod.Spec.NodeSelector[corev1.LabelHostname] = onNode
	}
	pods := cl.Kube().CoreV1().Pods(cl.Info.Namespace)
	if pod, err = pods.Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePods(t, pod.Name) })
	return pod
}

// waitPodReady waits (bounded: a worker's first sandbox makes the
// template's ready snapshot, minutes under TCG and load) for the Pod to
// be bound and Ready, and returns it.
func waitPodReady(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	testenv.Eventually(t, 6*time.Minute, func() error {
		p, err := cl.Kube().CoreV1().Pods(cl.Info.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("pod %s failed: %s: %s", name, p.Status.Reason, p.Status.Message)
		}
		if !podReady(p) {
			return fmt.Errorf("pod %s on %q: phase %s", name, p.Spec.NodeName, p.Status.Phase)
		}
		got = p
		return nil
	})
	return got
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// deletePods deletes the Pods and waits (bounded) until they are gone,
// which is when their workers have deleted the sandboxes.
func deletePods(t *testing.T, names ...string) {
	t.Helper()
	pods := cl.Kube().CoreV1().Pods(cl.Info.Namespace)
	for _, n := range names {
		if err := pods.Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete pod %s: %v", n, err)
		}
	}
	testenv.Eventually(t, 2*time.Minute, func() error {
		for _, n := range names {
			if _, err := pods.Get(context.Background(), n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("pod %s still there (%v)", n, err)
			}
		}
		return nil
	})
}

// workerIndex is the index of the worker named name.
func workerIndex(t *testing.T, name string) int {
	t.Helper()
	for i, w := range cl.Info.Workers {
		if w.Name == name {
			return i
		}
	}
	t.Fatalf("no worker %s", name)
	return -1
}

// workerClient is a worker-protocol client of worker i with the
// cluster's token.
func workerClient(t *testing.T, i int) *remote.Client {
	t.Helper()
	tok, err := remote.LoadToken(cl.Info.WorkerTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := remote.NewClient(remote.ClientConfig{Address: cl.Info.Workers[i].Address, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// vmmOf is what worker i says of sandbox id, through the protocol.
func vmmOf(t *testing.T, i int, id string) worker.SandboxStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := workerClient(t, i).Sandbox(ctx, id)
	if err != nil {
		t.Fatalf("worker %s: sandbox %s: %v", cl.Info.Workers[i].Name, id, err)
	}
	return st
}

// processAlive reports whether pid runs (not a zombie).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

var errNotYet = errors.New("not yet")
