package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/testenv"
)

// TestDrainMovesSandboxes: `kubectl drain --ignore-daemonsets --force` of
// a worker node running two sandboxes, each with a file written and a
// counter printing to its command's stdout. The worker suspends both to
// object storage before their Pods go; the control plane records each
// drain as a suspend operation and wakes the sandbox on another worker
// (the drained node is cordoned). After the drain both read running
// elsewhere, the file is there, the counter counts on from where it was,
// and the command's event stream reattached with `after` carries its new
// output. Then the node is uncordoned.
func TestDrainMovesSandboxes(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl not found (make setup installs Debian's kubernetes-client): %v", err)
	}
	r1, r2 := replica(t, 0), replica(t, 1)
	first := r1.create(map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256})
	node := first.Worker
	// The second sandbox goes to the same worker: the others cordoned
	// while it is created.
	var others []string
	for _, w := range cl.Info.Workers {
		if w.Name != node {
			others = append(others, w.Name)
			setUnschedulable(t, w.Name, true)
		}
	}
	second := r1.create(map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256})
	for _, w := range others {
		setUnschedulable(t, w, false)
	}
	if second.Worker != node {
		t.Fatalf("second sandbox on %s, want %s (the only schedulable worker)", second.Worker, node)
	}
	t.Cleanup(func() { setUnschedulable(t, node, false) })

	type moved struct {
		id, command string
		before      int    // the counter before the drain
		seq         uint64 // the last event seen before the drain
	}
	var sbs []*moved
	for _, sb := range []apiv1.Sandbox{first, second} {
		r1.exec(sb.ID, "echo kept-"+sb.ID+" > /root/kept")
		cmd := r1.startCommand(sb.ID, "i=0; while true; do i=$((i+1)); echo $i > /tmp/n; echo $i; sleep 0.2; done")
		testenv.Eventually(t, time.Minute, func() error { _, err := r1.counter(sb.ID); return err })
		seq, _ := r1.stdoutAfter(sb.ID, cmd, 0)
		n, err := r1.counter(sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, &moved{id: sb.ID, command: cmd, before: n, seq: seq})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	started := time.Now()
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", cl.Info.Kubeconfig, "--request-timeout=30s",
		"drain", "--ignore-daemonsets", "--force", "--timeout=5m", node).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl drain %s: %v\n%s", node, err, out)
	}
	t.Logf("kubectl drain %s took %s:\n%s", node, time.Since(started).Round(time.Millisecond), out)

	for _, m := range sbs {
		var sb apiv1.Sandbox
		testenv.Eventually(t, 5*time.Minute, func() error {
			sb = r2.sandbox(m.id)
			if sb.State == "failed" {
				t.Fatalf("drained sandbox %s failed: %+v", m.id, sb.LastError)
			}
			if sb.State != "running" || sb.Worker == "" || sb.Worker == node {
				return fmt.Errorf("sandbox %s %s on %q: %w", m.id, sb.State, sb.Worker, errNotYet)
			}
			return nil
		})
		if got := r2.exec(m.id, "cat /root/kept"); got != "kept-"+m.id+"\n" {
			t.Fatalf("%s woke on %s; the file reads %q", m.id, sb.Worker, got)
		}
		n, err := r2.counter(m.id)
		if err != nil || n < m.before {
			t.Fatalf("%s: counter %d (%v) after the drain, %d before: the process started again", m.id, n, err, m.before)
		}
		seq, last := r2.stdoutAfter(m.id, m.command, m.seq)
		if seq <= m.seq || last < m.before {
			t.Fatalf("%s: the reattached stream (after %d) gave seq %d, stdout %d; want output of the same counter past %d", m.id, m.seq, seq, last, m.before)
		}
		ops := r2.operations(m.id)
		if len(ops) < 3 || ops[0].Type != "wake" || ops[0].State != "succeeded" || ops[1].Type != "suspend" || ops[1].State != "succeeded" {
			t.Fatalf("%s's operations, newest first: %+v; want the drain's suspend, then a wake, both succeeded", m.id, ops)
		}
		t.Logf("%s: drained off %s, woke on %s; counter %d before, %d after; stream seq %d -> %d", m.id, node, sb.Worker, m.before, n, m.seq, seq)
	}

	if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", cl.Info.Kubeconfig, "--request-timeout=30s", "uncordon", node).CombinedOutput(); err != nil {
		t.Fatalf("kubectl uncordon %s: %v\n%s", node, err, out)
	}
	n, err := cl.Kube().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil || n.Spec.Unschedulable {
		t.Fatalf("node %s after uncordon: %v, unschedulable %v", node, err, n != nil && n.Spec.Unschedulable)
	}
}

// setUnschedulable cordons or uncordons a worker node.
func setUnschedulable(t *testing.T, node string, on bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on)
	if _, err := cl.Kube().CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("set %s unschedulable=%t: %v", node, on, err)
	}
}

// stdoutAfter attaches to a command's events after seq and reads until a
// stdout event: its seq and the number it printed (bounded).
func (a *api) stdoutAfter(id, command string, after uint64) (seq uint64, printed int) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := a.url + "/v1/sandboxes/" + id + "/commands/" + command + "/events?after=" + strconv.FormatUint(after, 10)
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	resp, err := httpClient.Do(req)
	if err != nil {
		a.t.Fatalf("attach to %s after %d: %v", command, after, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		a.t.Fatalf("attach to %s after %d: HTTP %d", command, after, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev struct {
			Seq  uint64 `json:"seq"`
			Type string `json:"type"`
			Data string `json:"data"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Type != "stdout" {
			if ev.Type == "exit" || ev.Type == "error" {
				a.t.Fatalf("command %s ended: %s", command, sc.Text())
			}
			continue
		}
		lines := strings.Fields(ev.Data)
		if len(lines) == 0 {
			continue
		}
		n, err := strconv.Atoi(lines[len(lines)-1])
		if err != nil {
			continue
		}
		return ev.Seq, n
	}
	a.t.Fatalf("no stdout on %s after %d (%v)", command, after, sc.Err())
	return 0, 0
}

// operations lists a sandbox's operations, newest first.
func (a *api) operations(id string) []apiv1.Operation {
	a.t.Helper()
	var out apiv1.OperationList
	if code := a.do("GET", "/v1/operations?target="+id, nil, &out); code != http.StatusOK {
		a.t.Fatalf("operations of %s: HTTP %d", id, code)
	}
	return out.Operations
}
