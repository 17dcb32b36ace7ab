package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/cluster/placement"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// TestSuspendKillWakeElsewhere: through the control plane's placement (as
// a control replica runs it) over the real spaced workers, kube-scheduler
// and the cluster's object store, a sandbox suspended on worker A (its
// snapshot uploaded, its Pod gone), worker A SIGKILLed, then woken: the
// wake's Pod lands on another worker, with the sandbox's file and its
// running process intact (still counting, never restarted).
func TestSuspendKillWakeElsewhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	p := roamPlacement(t, ctx)
	const id = "sbx_e2eroam"
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer dcancel()
		if err := p.DeleteSandbox(dctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	})
	// A worker's first sandbox makes the template's ready snapshot:
	// minutes under TCG and load.
	st, err := p.CreateSandbox(ctx, worker.SandboxSpec{ID: id, Template: "base", VCPUs: 1, MemoryMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	from := podNode(t, id)
	g, err := p.Agent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 256<<10)
	rand.Read(data)
	if _, err := g.WriteFile(ctx, "/root/roam.bin", 0o644, int64(len(data)), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Start(ctx, agentproto.ProcessSpec{ID: "counter",
		Shell: `i=0; while true; do i=$((i+1)); echo $i > /tmp/c.tmp; mv /tmp/c.tmp /tmp/counter; sleep 0.1; done`}); err != nil {
		t.Fatal(err)
	}
	before := counterPast(t, g, 2)

	if st, err = p.SuspendSandbox(ctx, id); err != nil || st.State != worker.VMSuspended {
		t.Fatalf("suspend: %+v, %v", st, err)
	}
	waitNoPod(t, id)
	i := workerIndex(t, from)
	cl.KillWorker(i)
	t.Cleanup(func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer rcancel()
		if err := cl.RestartWorker(rctx, i); err != nil {
			t.Errorf("restart %s: %v", from, err)
		}
	})
	// Once the node lifecycle controller has tainted its node (not ready
	// or unreachable, NoSchedule), the scheduler cannot pick it.
	testenv.Eventually(t, 3*time.Minute, func() error {
		n, err := cl.Kube().CoreV1().Nodes().Get(ctx, from, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, taint := range n.Spec.Taints {
			if (taint.Key == corev1.TaintNodeNotReady || taint.Key == corev1.TaintNodeUnreachable) && taint.Effect == corev1.TaintEffectNoSchedule {
				return nil
			}
		}
		return fmt.Errorf("node %s not tainted yet: %v", from, n.Spec.Taints)
	})
	if st, err := p.Sandbox(ctx, id); err != nil || st.State != worker.VMSuspended {
		t.Fatalf("suspended with its worker dead: %+v, %v", st, err)
	}

	if st, err = p.WakeSandbox(ctx, id); err != nil || st.State != worker.VMRunning || !st.Restored {
		t.Fatalf("wake: %+v, %v", st, err)
	}
	to := podNode(t, id)
	if to == from {
		t.Fatalf("woken on %s, the dead worker", to)
	}
	if g, err = p.Agent(ctx, id); err != nil {
		t.Fatal(err)
	}
	r, _, err := g.ReadFile(ctx, "/root/roam.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("file on %s after the wake: %d bytes (want %d), %v", to, len(got), len(data), err)
	}
	if after := counterPast(t, g, before); after <= before {
		t.Fatalf("counter %d before the suspend, %d after", before, after)
	}
	info, err := g.Get(ctx, "counter")
	if err != nil || info.Exit != nil {
		t.Fatalf("the counter process after the wake on %s: %+v, %v", to, info, err)
	}
	t.Logf("suspended on %s (then SIGKILLed), woken on %s; counter %d before", from, to, before)
}

// roamPlacement is a control replica's placement on the cluster: the
// worker protocol with the cluster's token, the cluster's object store.
func roamPlacement(t *testing.T, ctx context.Context) *placement.Placement {
	t.Helper()
	tok, err := remote.LoadToken(cl.Info.WorkerTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	loc, err := objstore.ParseURL(cl.Info.S3)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := objstore.LoadCredentials(cl.Info.S3CredentialsFile)
	if err != nil {
		t.Fatal(err)
	}
	store, err := objstore.Open(ctx, loc, creds, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	p, err := placement.New(ctx, cl.Kube(), placement.Config{Namespace: cl.Info.Namespace, ScheduleTimeout: 8 * time.Minute,
		Snapshots: objstore.Snapshots{Store: store},
		Dial: func(addr string) (worker.Worker, error) {
			return remote.NewClient(remote.ClientConfig{Address: addr, Token: tok})
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// podNode is the node sandbox id's Pod is bound to.
func podNode(t *testing.T, id string) string {
	t.Helper()
	pod, err := cl.Kube().CoreV1().Pods(cl.Info.Namespace).Get(context.Background(), strings.ReplaceAll(id, "_", "-"), metav1.GetOptions{})
	if err != nil || pod.Spec.NodeName == "" {
		t.Fatalf("pod of %s: %v (node %q)", id, err, pod.Spec.NodeName)
	}
	return pod.Spec.NodeName
}

// counterPast waits until the guest's counter passes n and returns it.
func counterPast(t *testing.T, g worker.Guest, n int) int {
	t.Helper()
	var last int
	testenv.Eventually(t, 2*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r, _, err := g.ReadFile(ctx, "/tmp/counter")
		if err != nil {
			return err
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return err
		}
		if last, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil || last <= n {
			return fmt.Errorf("counter %q, want past %d", b, n)
		}
		return nil
	})
	return last
}
