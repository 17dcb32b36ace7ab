package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/cluster/k8s"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/testenv"
)

// storeDown is how long a case keeps PostgreSQL down: longer than the
// operation lease, so leases run out while the store is gone.
const storeDown = 2 * operationLease

// PostgreSQL SIGKILLed (by the PID cluster.json records, its backends
// with it) while a create runs, and separately while a suspend runs, then
// started again on its data dir. While it is down both replicas answer the
// API 503 unavailable at once with a message that names no driver, socket
// or password, and /readyz turns 503; after the restart both are ready
// again by themselves, each operation reaches a terminal state, and the
// sandbox's state is what the worker and Kubernetes say: a running
// sandbox has its Pod and VM and answers exec, a failed create left no
// Pod and no VM on any worker, a suspended sandbox has no Pod and wakes
// with its file.
func TestStoreKilledMidOperation(t *testing.T) {
	r0, r1 := replica(t, 0), replica(t, 1)
	t.Run("create", func(t *testing.T) {
		created := r0.createSandbox(1, 256)
		id := created.Sandbox.ID
		t.Cleanup(func() { r1.deleteSandbox(id) })
		testenv.Eventually(t, 30*time.Second, func() error {
			pod, _ := k8s.PodName(id)
			_, err := cl.Kube().CoreV1().Pods(cl.Info.Namespace).Get(context.Background(), pod, metav1.GetOptions{})
			return err // the replica is inside the create once the Pod exists
		})
		outage(t, id)
		op := r1.waitOperation(created.Operation.ID, operationLease+scheduleTimeout+3*time.Minute)
		t.Logf("the create ended %s %s", op.State, errorOf(op))
		switch op.State {
		case "succeeded":
			sb := settled(t, r1, id, "running")
			assertRunsOn(t, r1, sb)
		case "failed":
			settled(t, r1, id, "failed")
			waitNoPod(t, id)
			assertNoVM(t, id)
		default:
			t.Fatalf("the create ended %s, want succeeded or failed", op.State)
		}
	})
	t.Run("suspend", func(t *testing.T) {
		sb := r0.create(map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256})
		r0.exec(sb.ID, "echo kept > /root/kept")
		var out apiv1.SandboxAndOperation
		if code := r0.do("POST", "/v1/sandboxes/"+sb.ID+"/suspend", nil, &out); code != http.StatusAccepted {
			t.Fatalf("suspend: HTTP %d", code)
		}
		outage(t, sb.ID)
		op := r1.waitOperation(out.Operation.ID, operationLease+3*time.Minute)
		t.Logf("the suspend ended %s %s", op.State, errorOf(op))
		got := settled(t, r1, sb.ID, "running", "suspended", "failed")
		switch got.State {
		case "running":
			assertRunsOn(t, r1, got)
		case "suspended":
			waitNoPod(t, sb.ID)
			lifecycle(t, r1, sb.ID, "wake")
			if out := r1.exec(sb.ID, "cat /root/kept"); out != "kept\n" {
				t.Fatalf("woken after the outage, the file reads %q", out)
			}
		default:
			t.Fatalf("after the suspend (%s) the sandbox reads %s: %v", op.State, got.State, got.LastError)
		}
	})
}

// outage kills PostgreSQL, checks what both replicas answer while it is
// down, holds it down storeDown, and starts it again; both replicas must
// then be ready again by themselves.
func outage(t *testing.T, id string) {
	t.Helper()
	if err := cl.KillPostgres(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	restart := func() {
		if restarted {
			return
		}
		restarted = true
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := cl.RestartPostgres(ctx); err != nil {
			t.Fatalf("restart PostgreSQL: %v", err)
		}
	}
	t.Cleanup(restart)
	down := time.Now()
	for i := range cl.ControlURLs() {
		r := replica(t, i)
		status, body := r.raw("GET", "/v1/sandboxes/"+id)
		if status != http.StatusServiceUnavailable || body.Code != errdefs.ErrUnavailable.Code() {
			t.Errorf("replica %d with the store down: GET sandbox answered %d %+v, want 503 unavailable", i+1, status, body)
		}
		for _, leak := range []string{"pgx", "postgres", "dial", "connect", "sql", ".s.PGSQL", "/tmp"} {
			if strings.Contains(strings.ToLower(body.Message), strings.ToLower(leak)) {
				t.Errorf("replica %d's 503 tells the tenant %q (%q)", i+1, leak, body.Message)
			}
		}
		testenv.Eventually(t, 30*time.Second, func() error {
			if s := r.readyz(); s != http.StatusServiceUnavailable {
				return fmt.Errorf("replica %d /readyz answers %d with the store down", i+1, s)
			}
			return nil
		})
	}
	time.Sleep(time.Until(down.Add(storeDown)))
	restart()
	for i := range cl.ControlURLs() {
		r := replica(t, i)
		testenv.Eventually(t, time.Minute, func() error {
			if s := r.readyz(); s != http.StatusOK {
				return fmt.Errorf("replica %d /readyz answers %d after the store came back", i+1, s)
			}
			return nil
		})
	}
}

// raw sends a request and returns the status and the error body, bounded
// well under the client's timeout: an answer that does not come is a hang.
func (a *api) raw(method, path string) (int, apiv1.Error) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.url+path, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	resp, err := httpClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: no answer within 30s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body apiv1.ErrorBody
	_ = json.Unmarshal(b, &body)
	return resp.StatusCode, body.Error
}

// readyz is the replica's /readyz status (0: no answer within 10s).
func (a *api) readyz() int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.url+"/readyz", nil)
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// settled waits (bounded) until the sandbox reads one of states and
// returns it: a taken-over operation ends before its sandbox is made true.
func settled(t *testing.T, a *api, id string, states ...string) apiv1.Sandbox {
	t.Helper()
	var sb apiv1.Sandbox
	testenv.Eventually(t, time.Minute, func() error {
		sb = a.sandbox(id)
		for _, s := range states {
			if string(sb.State) == s {
				return nil
			}
		}
		return fmt.Errorf("sandbox %s reads %s, want one of %v", id, sb.State, states)
	})
	return sb
}

// assertRunsOn checks that a sandbox reading running is: its Pod is bound
// to the worker it names and Ready, that worker's VM runs, exec answers.
func assertRunsOn(t *testing.T, a *api, sb apiv1.Sandbox) {
	t.Helper()
	if sb.Worker == "" {
		t.Fatalf("sandbox %s reads running on no worker", sb.ID)
	}
	pod := waitPodReady(t, mustPodName(t, sb.ID))
	if pod.Spec.NodeName != sb.Worker {
		t.Errorf("sandbox %s reads worker %s, its Pod is on %s", sb.ID, sb.Worker, pod.Spec.NodeName)
	}
	if st := vmmOf(t, workerIndex(t, sb.Worker), sb.ID); st.State != "running" {
		t.Errorf("sandbox %s reads running, its worker says %s", sb.ID, st.State)
	}
	if out := a.exec(sb.ID, "echo alive"); out != "alive\n" {
		t.Errorf("exec in %s: %q", sb.ID, out)
	}
}

// assertNoVM checks that no worker has a VM for sandbox id.
func assertNoVM(t *testing.T, id string) {
	t.Helper()
	for i := range cl.Info.Workers {
		testenv.Eventually(t, time.Minute, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := workerClient(t, i).Sandbox(ctx, id)
			if errdefs.ClassOf(err) == errdefs.ErrNotFound {
				return nil
			}
			return fmt.Errorf("worker %s still has sandbox %s: %s (%v)", cl.Info.Workers[i].Name, id, st.State, err)
		})
	}
}

func mustPodName(t *testing.T, id string) string {
	t.Helper()
	name, err := k8s.PodName(id)
	if err != nil {
		t.Fatal(err)
	}
	return name
}
