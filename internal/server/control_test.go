package server

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/testenv/kuberig"
	"github.com/space-sandbox/space/internal/testenv/pgtest"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	kuberig.StopShared(code != 0)
	os.Exit(code)
}

var defaultTestQuota = store.Quota{MaxSandboxes: 20, MaxVCPUs: 32, MaxMemoryMiB: 32768}

// TestControlReplicas runs two control replicas on one PostgreSQL and a
// real Kubernetes control plane, with two worker nodes: what one replica
// creates the other serves, kube-scheduler places it, guest calls go
// through the worker protocol, the singleton loops run on one replica, an
// unplaceable create ends resource_exhausted, and the operation of a
// replica that lost its database is ended by the other with the sandbox's
// state true.
func TestControlReplicas(t *testing.T) {
	c := newControlCluster(t)
	n1, n2 := c.addNode("a"), c.addNode("b")
	nodes := map[string]*testNode{n1.name: n1, n2.name: n2}
	r1, r2 := c.startReplica("r1"), c.startReplica("r2")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	if _, err := r1.admin.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	key, err := r2.admin.CreateKey(ctx, "acme", false)
	if err != nil {
		t.Fatal(err)
	}
	via1, _ := client.New(r1.url, key.Key, nil)
	via2, _ := client.New(r2.url, key.Key, nil)

	podNode := func(id string) (string, error) {
		name, _ := k8s.PodName(id)
		pod, err := c.rig.Client.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return pod.Spec.NodeName, nil
	}

	var first string
	t.Run("CreateOnOneServeOnOther", func(t *testing.T) {
		res, err := via1.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base", VCPUs: 1, MemoryMiB: 256})
		if err != nil {
			t.Fatal(err)
		}
		first = res.Sandbox.ID
		op, err := via2.WaitOperation(ctx, res.Operation.ID)
		if err != nil || op.State != apiv1.OpSucceeded {
			t.Fatalf("create = %+v, %v", op, err)
		}
		sb, err := via2.GetSandbox(ctx, first)
		if err != nil {
			t.Fatal(err)
		}
		bound, err := podNode(first)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != "running" || sb.Worker == "" || sb.Worker != bound || nodes[bound] == nil {
			t.Fatalf("sandbox = state %s worker %q; its Pod is bound to %q", sb.State, sb.Worker, bound)
		}
		if nodes[bound].w.VM(first) == nil {
			t.Fatalf("the worker of node %s has no VM for %s", bound, first)
		}
		out, err := via2.Exec(ctx, first, apiv1.ExecRequest{CreateCommandRequest: apiv1.CreateCommandRequest{
			Argv: []string{"sh", "-c", "echo hello from $0", "the-guest"}}})
		if err != nil {
			t.Fatal(err)
		}
		if out.ExitCode == nil || *out.ExitCode != 0 || out.Stdout != "hello from the-guest\n" {
			t.Fatalf("exec through replica 2 = %+v", out)
		}
		if _, err := via1.PutFile(ctx, first, "/tmp/note", 0o644, strings.NewReader("written via r1")); err != nil {
			t.Fatal(err)
		}
		rc, err := via2.GetFile(ctx, first, "/tmp/note")
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, rc); got != "written via r1" {
			t.Fatalf("file read through replica 2 = %q", got)
		}
	})

	t.Run("AdminWorkers", func(t *testing.T) {
		if _, err := via1.Workers(ctx); err == nil {
			t.Fatal("a tenant key listed the workers")
		}
		list, err := r2.admin.Workers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		allocated := 0
		for _, w := range list.Workers {
			n := nodes[w.Name]
			if n == nil {
				continue
			}
			names = append(names, w.Name)
			if w.State != apiv1.WorkerReady || w.Address != n.addr || w.Capacity == nil ||
				*w.Capacity != (apiv1.WorkerResources{VCPUs: 4, MemoryMiB: 4096, Sandboxes: 8}) {
				t.Errorf("worker %+v (capacity %+v), want ready at %s with 4 vCPUs, 4096 MiB, 8 sandboxes", w, w.Capacity, n.addr)
			}
			allocated += w.Allocated.Sandboxes
			if w.Allocated.Sandboxes == 1 && (w.Allocated.VCPUs != 1 || w.Allocated.MemoryMiB != 256+k8s.VMMOverheadMiB) {
				t.Errorf("worker %s allocated %+v, want 1 vCPU and %d MiB", w.Name, w.Allocated, 256+k8s.VMMOverheadMiB)
			}
		}
		slices.Sort(names)
		if len(names) != 2 || allocated != 1 {
			t.Fatalf("workers listed %v with %d sandboxes allocated, want both nodes and 1", names, allocated)
		}
	})

	t.Run("Unschedulable", func(t *testing.T) {
		res, err := via2.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base", VCPUs: 8, MemoryMiB: 256})
		if err != nil {
			t.Fatal(err)
		}
		op, err := via1.WaitOperation(ctx, res.Operation.ID)
		if err != nil {
			t.Fatal(err)
		}
		if op.State != apiv1.OpFailed || op.Error == nil || op.Error.Code != "resource_exhausted" {
			t.Fatalf("create of 8 vCPUs on 4-vCPU workers = %+v (error %+v), want failed resource_exhausted", op, op.Error)
		}
		sb, err := via1.GetSandbox(ctx, res.Sandbox.ID)
		if err != nil || sb.State != "failed" || sb.Worker != "" {
			t.Fatalf("unplaced sandbox = %+v, %v", sb, err)
		}
		if _, err := podNode(res.Sandbox.ID); !apierrors.IsNotFound(err) {
			t.Fatalf("the unplaced sandbox's Pod is still there: %v", err)
		}
	})

	t.Run("LeaderLoops", func(t *testing.T) {
		// Exactly one replica leads, and its loops run: expiry deletes a
		// sandbox created through either replica.
		testenv.Eventually(t, 30*time.Second, func() error {
			if l1, l2 := c.logs.count("who=r1", "msg=leading"), c.logs.count("who=r2", "msg=leading"); l1+l2 != 1 {
				return fmt.Errorf("replicas leading: r1 %d, r2 %d", l1, l2)
			}
			return nil
		})
		res, err := via2.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base", TimeoutSeconds: 2})
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 60*time.Second, func() error {
			sb, err := via1.GetSandbox(ctx, res.Sandbox.ID)
			if err != nil {
				return err
			}
			if sb.State != "deleted" {
				return fmt.Errorf("expired sandbox is %s", sb.State)
			}
			return nil
		})
		if l1, l2 := c.logs.count("who=r1", "msg=leading"), c.logs.count("who=r2", "msg=leading"); l1+l2 != 1 {
			t.Fatalf("replicas that led: r1 %d, r2 %d", l1, l2)
		}
	})

	t.Run("StartLeavesLiveOperations", func(t *testing.T) {
		// A replica that starts while another runs an operation leaves it
		// to that replica: it takes over only leases that ran out.
		gate := make(chan struct{})
		for _, n := range nodes {
			n.w.SetCreateGate(gate)
		}
		released := false
		release := func() {
			if !released {
				released = true
				close(gate)
				for _, n := range nodes {
					n.w.SetCreateGate(nil)
				}
			}
		}
		defer release()
		res, err := via2.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base"})
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, func() error {
			op, err := via1.GetOperation(ctx, res.Operation.ID, 0)
			if err != nil || op.State != "running" {
				return fmt.Errorf("operation %+v, %v", op, err)
			}
			return nil
		})
		r3 := c.startReplica("r3")
		defer r3.stop(t)
		// What must not happen is an abort: give r3's take-over loop a
		// lease period (three passes) to make one, if it would.
		time.Sleep(testOpLease)
		if op, err := via1.GetOperation(ctx, res.Operation.ID, 0); err != nil || op.State != "running" {
			t.Fatalf("the running create after a replica started = %+v, %v", op, err)
		}
		release()
		op, err := via1.WaitOperation(ctx, res.Operation.ID)
		if err != nil || op.State != apiv1.OpSucceeded {
			t.Fatalf("create = %+v (error %+v), %v", op, op.Error, err)
		}
		via3, _ := client.New(r3.url, key.Key, nil)
		if sb, err := via3.GetSandbox(ctx, res.Sandbox.ID); err != nil || sb.State != "running" || nodes[sb.Worker] == nil {
			t.Fatalf("sandbox through replica 3 = %+v, %v", sb, err)
		}
	})

	t.Run("TakeOver", func(t *testing.T) {
		gate := make(chan struct{})
		for _, n := range nodes {
			n.w.SetCreateGate(gate)
		}
		released := false
		release := func() {
			if !released {
				released = true
				close(gate)
				for _, n := range nodes {
					n.w.SetCreateGate(nil)
				}
			}
		}
		defer release()
		res, err := via1.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base"})
		if err != nil {
			t.Fatal(err)
		}
		id := res.Sandbox.ID
		// Replica 1 runs the create; the worker holds it.
		testenv.Eventually(t, 30*time.Second, func() error {
			node, err := podNode(id)
			if err != nil || node == "" {
				return fmt.Errorf("pod not bound: %v", err)
			}
			op, err := via2.GetOperation(ctx, res.Operation.ID, 0)
			if err != nil || op.State != "running" {
				return fmt.Errorf("operation %+v, %v", op, err)
			}
			return nil
		})
		r1.cut()
		// The worker lets the create it holds return; replica 1 cannot
		// record it.
		release()
		op, err := via2.WaitOperation(ctx, res.Operation.ID)
		if err != nil {
			t.Fatal(err)
		}
		if op.State != apiv1.OpFailed || op.Error == nil || op.Error.Code != "aborted" {
			t.Fatalf("create of the lost replica = %+v (error %+v), want failed aborted", op, op.Error)
		}
		// The take-over settles the sandbox before it ends the operation:
		// read as soon as the operation is terminal, the sandbox is failed.
		sb, err := via2.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != "failed" || sb.LastError == nil || !strings.Contains(sb.LastError.Message, "control replica") {
			t.Fatalf("sandbox read as soon as the lost create ended: state %s, last_error %+v", sb.State, sb.LastError)
		}
		testenv.Eventually(t, 60*time.Second, func() error {
			if _, err := podNode(id); !apierrors.IsNotFound(err) {
				return fmt.Errorf("the failed sandbox's Pod is still there: %v", err)
			}
			for _, n := range nodes {
				if n.w.VM(id) != nil {
					return fmt.Errorf("node %s still has its VM", n.name)
				}
			}
			return nil
		})
		// Replica 2 serves on; the first sandbox is untouched, and with
		// replica 1 gone, replica 2 leads.
		r1.stop(t)
		if sb, err := via2.GetSandbox(ctx, first); err != nil || sb.State != "running" {
			t.Fatalf("first sandbox after replica 1 died = %+v, %v", sb, err)
		}
		testenv.Eventually(t, 30*time.Second, func() error {
			if c.logs.count("who=r2", "msg=leading") < 1 {
				return fmt.Errorf("replica 2 does not lead")
			}
			return nil
		})
	})
}
