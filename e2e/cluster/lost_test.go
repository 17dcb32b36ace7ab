package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/testenv"
)

// A worker SIGKILLed, as a lost host looks to Kubernetes: its Lease stops,
// its node reads NotReady after the node-monitor grace, the node lifecycle
// controller evicts its Pods after their tolerationSeconds, and the control
// plane fails each of its running sandboxes with last_error saying the
// worker was lost; their running commands end "lost". A sandbox on
// another worker keeps running. The worker is restarted after: it adopts
// its VMs, finds their Pods gone and deletes them.
func TestDeadWorkerFailsItsSandboxes(t *testing.T) {
	r0, r1 := replica(t, 0), replica(t, 1)
	var ids, ops []string
	for range 2 {
		c := r0.createSandbox(1, 256)
		ids, ops = append(ids, c.Sandbox.ID), append(ops, c.Operation.ID)
	}
	t.Cleanup(func() {
		for _, id := range ids {
			r1.deleteSandbox(id)
		}
	})
	for i, op := range ops {
		if got := r0.waitOperation(op, 8*time.Minute); got.State != "succeeded" {
			t.Fatalf("create %s: %s (%s)", ids[i], got.State, errorOf(got))
		}
	}
	// The victim is the first sandbox's worker. The survivor is a sandbox
	// on another worker: the second, or, when the scheduler put both on
	// one worker (filling its 2 vCPUs), a 2-vCPU one that must land
	// elsewhere.
	victim := r0.sandbox(ids[0])
	survivor := ids[1]
	onVictim := []string{victim.ID}
	if r0.sandbox(ids[1]).Worker == victim.Worker {
		onVictim = append(onVictim, ids[1])
		survivor = r0.create(map[string]any{"template": "base", "vcpus": 2, "memory_mib": 256}).ID
	}
	cmdID := r0.startCommand(victim.ID, "sleep 600")

	w := workerIndex(t, victim.Worker)
	cl.KillWorker(w)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := cl.RestartWorker(ctx, w); err != nil {
			t.Errorf("restart worker %d: %v", w+1, err)
		}
	})
	killed := time.Now()
	// Lease stops → NotReady after nodeGrace → evicted after podToleration;
	// the bound leaves the controller manager's monitor period and a
	// loaded machine room.
	bound := nodeLease + nodeGrace + time.Duration(podToleration)*time.Second + 2*time.Minute
	for _, id := range onVictim {
		testenv.Eventually(t, bound, func() error {
			if sb := r1.sandbox(id); sb.State != "failed" {
				return fmt.Errorf("sandbox %s on the dead worker reads %s", id, sb.State)
			}
			return nil
		})
		sb := r1.sandbox(id)
		if sb.LastError == nil || sb.LastError.Code != "unavailable" || !strings.Contains(sb.LastError.Message, "worker") || !strings.Contains(sb.LastError.Message, "lost") {
			t.Errorf("sandbox %s failed with last_error %+v, want one saying its worker was lost", id, sb.LastError)
		}
		if sb.Worker != "" {
			t.Errorf("failed sandbox %s still names worker %q", id, sb.Worker)
		}
	}
	t.Logf("the dead worker's sandboxes read failed %v after the SIGKILL", time.Since(killed).Round(time.Second))
	var got apiv1.CommandResponse
	if code := r1.do("GET", "/v1/sandboxes/"+victim.ID+"/commands/"+cmdID, nil, &got); code != http.StatusOK {
		t.Fatalf("GET the dead worker's command: HTTP %d", code)
	}
	cmd := got.Command
	if cmd.State != apiv1.CommandExited || cmd.Exit == nil || cmd.Exit.Reason != "lost" {
		t.Errorf("the dead worker's running command: state %s exit %+v, want exited lost", cmd.State, cmd.Exit)
	}
	if sb := r1.sandbox(survivor); sb.State != "running" {
		t.Errorf("the sandbox on another worker reads %s after the death, want running", sb.State)
	} else if out := r1.exec(survivor, "echo alive"); out != "alive\n" {
		t.Errorf("exec in the surviving sandbox: %q", out)
	}
}
