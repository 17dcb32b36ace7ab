package server

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/testenv/kuberig"
)

func TestParseWorkerNodeFlags(t *testing.T) {
	cfg, err := ParseWorkerFlags([]string{"--kubeconfig", "/k", "--vcpus", "3", "--memory-mib", "2048", "--sandboxes", "5",
		"--control", "http://127.0.0.1:8080, http://127.0.0.1:8081"})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	want, _ := k8s.NodeName(host)
	if n := cfg.Node; n.NodeName != want || n.Namespace != k8s.DefaultNamespace || n.VCPUs != 3 || n.MemoryMiB != 2048 || n.Sandboxes != 5 {
		t.Errorf("node flags: %+v (want node name %q)", n, want)
	}
	if urls := cfg.Node.controlURLs(); !slices.Equal(urls, []string{"http://127.0.0.1:8080", "http://127.0.0.1:8081"}) {
		t.Errorf("--control URLs = %q", urls)
	}
	if cfg.Node.KubeRate != DefaultWorkerKubeRate {
		t.Errorf("Kubernetes rate %+v, want the default %+v", cfg.Node.KubeRate, DefaultWorkerKubeRate)
	}
	for _, bad := range [][]string{
		{"--kubeconfig", "/k", "--vcpus", "0"},
		{"--kubeconfig", "/k", "--node-name", "Not_A_Name"},
		{"--kubeconfig", "/k", "--advertise-address", "example.com"},
		{"--kubeconfig", "/k", "--node-lease", "1s"},
		{"--kubeconfig", "/k", "--kube-qps", "-1"},
		{"--control", "ftp://x"},
		{"--control", "http://127.0.0.1:8080,nohost"},
	} {
		_, err := ParseWorkerFlags(bad)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseWorkerFlags(%v) = %v, want invalid argument", bad, err)
		}
	}
	nc := NodeConfig{}
	if _, err := nc.nodeAddress(&net.TCPAddr{IP: net.IPv4zero, Port: 7070}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("0.0.0.0 without --advertise-address: %v", err)
	}
	nc.AdvertiseAddress = "10.1.2.3"
	if a, err := nc.nodeAddress(&net.TCPAddr{IP: net.IPv4zero, Port: 7070}); err != nil || a != "10.1.2.3:7070" {
		t.Errorf("advertised address = %q, %v", a, err)
	}
}

// A worker started with --kubeconfig registers its node, Ready, with its
// protocol address, and keeps serving the protocol; when its ctx ends both
// stop.
func TestServeWorkerRegistersNode(t *testing.T) {
	rig := kuberig.Start(t, kuberig.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nc := NodeConfig{Kubeconfig: rig.Kubeconfig, NodeName: "space-node-test", Namespace: k8s.DefaultNamespace,
		VCPUs: 2, MemoryMiB: 1024, Sandboxes: 4, LeaseDuration: 8 * time.Second}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() {
		served <- serveWorkerAndNode(ctx, apitest.NewWorker(t), ln, WorkerServing{Token: testToken(t)}, nc)
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	var got *corev1.Node
	testenv.Eventually(t, time.Minute, func() error {
		n, err := rig.Client.CoreV1().Nodes().Get(ctx, nc.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				got = n
				return nil
			}
		}
		return errors.New("node not Ready yet")
	})
	if got.Labels[k8s.LabelWorker] != "true" || got.Annotations[k8s.AnnotationWorkerPort] != port ||
		got.Status.Capacity.Cpu().Value() != 2 || got.Status.Capacity.Pods().Value() != 4 {
		t.Errorf("node: labels %v annotations %v capacity %v (want port %s)", got.Labels, got.Annotations, got.Status.Capacity, port)
	}
	ip := ""
	for _, a := range got.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = a.Address
		}
	}
	if ip != "127.0.0.1" {
		t.Errorf("node InternalIP = %q, want 127.0.0.1", ip)
	}
	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serveWorkerAndNode: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serveWorkerAndNode did not return 30s after its ctx ended")
	}
}
