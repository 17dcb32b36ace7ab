package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/worker"
)

// waitOp waits for an operation and fails unless it ends in state want.
func (e *env) waitOp(c *client.Client, op *apiv1.Operation, want string) *apiv1.Operation {
	e.t.Helper()
	got, err := c.WaitOperation(context.Background(), op.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	if got.State != want {
		e.t.Fatalf("operation %s (%s) is %s (%+v), want %s", got.ID, got.Type, got.State, got.Error, want)
	}
	return got
}

// wantConflict checks a 409 carrying the current state.
func wantConflict(t *testing.T, what string, err error, state string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 409 || ce.Details["state"] != state {
		t.Fatalf("%s: got %v, want 409 with state %s", what, err, state)
	}
}

func (e *env) state(c *client.Client, id string) string {
	e.t.Helper()
	sb, err := c.GetSandbox(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return sb.State
}

func (e *env) writeFile(c *client.Client, id, path, data string) {
	e.t.Helper()
	if _, err := c.PutFile(context.Background(), id, path, 0o644, strings.NewReader(data)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) readFile(c *client.Client, id, path string) string {
	e.t.Helper()
	rc, err := c.GetFile(context.Background(), id, path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

func TestPauseSuspendWake(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	sb := e.running(e.bob, nil)
	e.writeFile(e.bob, sb.ID, "/keep.txt", "kept")

	op, err := e.bob.PauseSandbox(ctx, sb.ID)
	if err != nil || op.Type != "pause" || op.Target != sb.ID {
		t.Fatalf("pause: %+v %v", op, err)
	}
	res := e.waitOp(e.bob, op, apiv1.OpSucceeded)
	if !strings.Contains(string(res.Result), `"state":"paused"`) {
		t.Errorf("pause result: %s", res.Result)
	}
	_, err = e.bob.PauseSandbox(ctx, sb.ID)
	wantConflict(t, "pause paused", err, "paused")
	_, err = e.bob.Exec(ctx, sb.ID, apiv1.ExecRequest{CreateCommandRequest: apiv1.CreateCommandRequest{Argv: []string{"true"}}})
	wantConflict(t, "exec paused", err, "paused")

	op, err = e.bob.SuspendSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.waitOp(e.bob, op, apiv1.OpSucceeded)
	got, err := e.bob.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != "suspended" || got.Usage == nil || got.Usage.SnapshotBytes == 0 {
		t.Fatalf("suspended sandbox: %+v %v", got, err)
	}
	for name, call := range map[string]func() error{
		"exec": func() error {
			_, err := e.bob.Exec(ctx, sb.ID, apiv1.ExecRequest{CreateCommandRequest: apiv1.CreateCommandRequest{Argv: []string{"true"}}})
			return err
		},
		"command": func() error {
			_, err := e.bob.CreateCommand(ctx, sb.ID, apiv1.CreateCommandRequest{Argv: []string{"true"}})
			return err
		},
		"pause":   func() error { _, err := e.bob.PauseSandbox(ctx, sb.ID); return err },
		"suspend": func() error { _, err := e.bob.SuspendSandbox(ctx, sb.ID); return err },
		"file": func() error {
			_, err := e.bob.GetFile(ctx, sb.ID, "/keep.txt")
			return err
		},
	} {
		wantConflict(t, name+" on suspended", call(), "suspended")
	}

	op, err = e.bob.WakeSandbox(ctx, sb.ID)
	if err != nil || op.Type != "wake" {
		t.Fatalf("wake: %+v %v", op, err)
	}
	e.waitOp(e.bob, op, apiv1.OpSucceeded)
	if st := e.state(e.bob, sb.ID); st != "running" {
		t.Fatalf("after wake: %s", st)
	}
	if got := e.readFile(e.bob, sb.ID, "/keep.txt"); got != "kept" {
		t.Fatalf("file after wake: %q", got)
	}
	_, err = e.bob.WakeSandbox(ctx, sb.ID)
	wantConflict(t, "wake running", err, "running")

	// Another tenant's sandbox is not found.
	var ce *client.Error
	if _, err := e.alice.PauseSandbox(ctx, sb.ID); !errors.As(err, &ce) || ce.Status != 404 {
		t.Fatalf("alice pauses bob's sandbox: %v", err)
	}
}

// TestTransitionsSerialised: operations queue in order per sandbox and each
// checks the state again when it starts; the transitional state is visible
// and refuses other calls.
func TestTransitionsSerialised(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	sb := e.running(e.bob, nil)
	gate := make(chan struct{})
	e.worker.SetLifecycleGate(gate)
	// The checkpoint holds the queue; the sandbox stays running meanwhile,
	// so the edge accepts all three.
	ck, err := e.bob.CreateCheckpoint(ctx, sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	var ops []*apiv1.Operation
	for _, call := range []func(context.Context, string, ...client.CallOption) (*apiv1.Operation, error){
		e.bob.PauseSandbox, e.bob.SuspendSandbox, e.bob.PauseSandbox,
	} {
		op, err := call(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, op)
	}
	close(gate)
	e.waitOp(e.bob, &ck.Operation, apiv1.OpSucceeded)
	e.waitOp(e.bob, ops[0], apiv1.OpSucceeded)
	e.waitOp(e.bob, ops[1], apiv1.OpSucceeded)
	res := e.waitOp(e.bob, ops[2], apiv1.OpFailed)
	if res.Error == nil || res.Error.Code != "conflict" || !strings.Contains(res.Error.Message, "suspended") {
		t.Fatalf("second pause: %+v", res.Error)
	}
	// While a wake is held, the sandbox is waking and refuses other calls.
	gate = make(chan struct{})
	e.worker.SetLifecycleGate(gate)
	wake, err := e.bob.WakeSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.waitFor(func() bool { return e.state(e.bob, sb.ID) == "waking" })
	_, err = e.bob.SuspendSandbox(ctx, sb.ID)
	wantConflict(t, "suspend while waking", err, "waking")
	_, err = e.bob.DeleteSandbox(ctx, sb.ID)
	wantConflict(t, "delete while waking", err, "waking")
	close(gate)
	e.waitOp(e.bob, wake, apiv1.OpSucceeded)
	if st := e.state(e.bob, sb.ID); st != "running" {
		t.Fatalf("state %s", st)
	}
}

func (e *env) waitFor(cond func() bool) {
	e.t.Helper()
	testenv.Eventually(e.t, 20*time.Second, func() error {
		if !cond() {
			return errors.New("condition not met")
		}
		return nil
	})
}

func TestWakeDataLoss(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	sb := e.running(e.bob, nil)
	op, _ := e.bob.SuspendSandbox(ctx, sb.ID)
	e.waitOp(e.bob, op, apiv1.OpSucceeded)
	e.worker.WakeErr = fmt.Errorf("snapshot memory file checksum mismatch: %w", errdefs.ErrDataLoss)
	op, err := e.bob.WakeSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	res := e.waitOp(e.bob, op, apiv1.OpFailed)
	if res.Error == nil || res.Error.Code != "data_loss" || strings.Contains(res.Error.Message, "checksum") {
		t.Fatalf("wake error: %+v", res.Error)
	}
	got, err := e.bob.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != "failed" || got.LastError == nil || got.LastError.Code != "data_loss" {
		t.Fatalf("sandbox after data loss: %+v %v", got, err)
	}
	if e.worker.VM(sb.ID) == nil {
		t.Fatal("the damaged snapshot was removed before delete")
	}
	del, err := e.bob.DeleteSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.waitOp(e.bob, del, apiv1.OpSucceeded)
}

func TestCheckpointBranchRestore(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	sb := e.running(e.bob, nil)
	e.writeFile(e.bob, sb.ID, "/f", "v1")

	ck, err := e.bob.CreateCheckpoint(ctx, sb.ID, "first")
	if err != nil || ck.Operation.Type != "checkpoint" || ck.Operation.Target != sb.ID || ck.Checkpoint.State != "creating" {
		t.Fatalf("checkpoint: %+v %v", ck, err)
	}
	e.waitOp(e.bob, &ck.Operation, apiv1.OpSucceeded)
	got, err := e.bob.GetCheckpoint(ctx, ck.Checkpoint.ID)
	if err != nil || got.State != "ready" || got.Sandbox != sb.ID || got.Name != "first" || got.SizeBytes == 0 || got.Parent != "" {
		t.Fatalf("get checkpoint: %+v %v", got, err)
	}
	if st := e.state(e.bob, sb.ID); st != "running" {
		t.Fatalf("sandbox after checkpoint: %s", st)
	}
	e.writeFile(e.bob, sb.ID, "/f", "v2")

	// Branch: starts with the checkpoint's files, isolated from the parent.
	br, err := e.bob.CreateSandbox(ctx, apiv1.CreateSandboxRequest{FromCheckpoint: ck.Checkpoint.ID})
	if err != nil || br.Operation.Type != "branch" || br.Sandbox.Template != sb.Template {
		t.Fatalf("branch: %+v %v", br, err)
	}
	e.waitOp(e.bob, &br.Operation, apiv1.OpSucceeded)
	if got := e.readFile(e.bob, br.Sandbox.ID, "/f"); got != "v1" {
		t.Fatalf("branch sees %q", got)
	}
	e.writeFile(e.bob, br.Sandbox.ID, "/f", "branch")
	if got := e.readFile(e.bob, sb.ID, "/f"); got != "v2" {
		t.Fatalf("parent sees %q after the branch wrote", got)
	}
	// A checkpoint of the branch names its parent checkpoint.
	ck2, err := e.bob.CreateCheckpoint(ctx, br.Sandbox.ID, "")
	if err != nil || ck2.Checkpoint.Parent != ck.Checkpoint.ID {
		t.Fatalf("branch checkpoint: %+v %v", ck2, err)
	}
	e.waitOp(e.bob, &ck2.Operation, apiv1.OpSucceeded)

	// Restore in place rolls the parent back.
	op, err := e.bob.RestoreSandbox(ctx, sb.ID, ck.Checkpoint.ID)
	if err != nil || op.Type != "restore" {
		t.Fatalf("restore: %+v %v", op, err)
	}
	e.waitOp(e.bob, op, apiv1.OpSucceeded)
	if got := e.readFile(e.bob, sb.ID, "/f"); got != "v1" {
		t.Fatalf("restored parent sees %q", got)
	}
	// The branch's own checkpoint is not of the parent's lineage.
	var ce *client.Error
	if _, err := e.bob.RestoreSandbox(ctx, sb.ID, ck2.Checkpoint.ID); !errors.As(err, &ce) || ce.Status != 400 {
		t.Fatalf("restore to another lineage: %v", err)
	}
	// The branch may restore to its parent's checkpoint.
	op, err = e.bob.RestoreSandbox(ctx, br.Sandbox.ID, ck.Checkpoint.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.waitOp(e.bob, op, apiv1.OpSucceeded)

	list, err := e.bob.ListCheckpoints(ctx, sb.ID, client.Page{})
	if err != nil || len(list.Checkpoints) != 1 || list.Checkpoints[0].ID != ck.Checkpoint.ID {
		t.Fatalf("list: %+v %v", list, err)
	}

	// Tenant isolation: alice sees none of it.
	for name, call := range map[string]func() error{
		"get":    func() error { _, err := e.alice.GetCheckpoint(ctx, ck.Checkpoint.ID); return err },
		"delete": func() error { return e.alice.DeleteCheckpoint(ctx, ck.Checkpoint.ID) },
		"list":   func() error { _, err := e.alice.ListCheckpoints(ctx, sb.ID, client.Page{}); return err },
		"branch": func() error {
			_, err := e.alice.CreateSandbox(ctx, apiv1.CreateSandboxRequest{FromCheckpoint: ck.Checkpoint.ID})
			return err
		},
		"checkpoint": func() error { _, err := e.alice.CreateCheckpoint(ctx, sb.ID, ""); return err },
	} {
		if err := call(); !errors.As(err, &ce) || ce.Status != 404 {
			t.Errorf("alice %s: %v", name, err)
		}
	}

	// Bad branch requests.
	if _, err := e.bob.CreateSandbox(ctx, apiv1.CreateSandboxRequest{FromCheckpoint: ck.Checkpoint.ID, VCPUs: 2}); !errors.As(err, &ce) || ce.Status != 400 {
		t.Errorf("branch with vcpus: %v", err)
	}
	if _, err := e.bob.CreateSandbox(ctx, apiv1.CreateSandboxRequest{FromCheckpoint: "ckpt_nope"}); !errors.As(err, &ce) || ce.Status != 404 {
		t.Errorf("branch of unknown checkpoint: %v", err)
	}

	// Checkpoint of a suspended sandbox is a state conflict.
	sop, _ := e.bob.SuspendSandbox(ctx, sb.ID)
	e.waitOp(e.bob, sop, apiv1.OpSucceeded)
	_, err = e.bob.CreateCheckpoint(ctx, sb.ID, "")
	wantConflict(t, "checkpoint suspended", err, "suspended")

	// Delete: 204, then gone; branches keep working.
	if err := e.bob.DeleteCheckpoint(ctx, ck.Checkpoint.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.bob.GetCheckpoint(ctx, ck.Checkpoint.ID); !errors.As(err, &ce) || ce.Status != 404 {
		t.Fatalf("deleted checkpoint: %v", err)
	}
	if got := e.readFile(e.bob, br.Sandbox.ID, "/f"); got != "v1" {
		t.Fatalf("branch after checkpoint delete: %q", got)
	}
}

func TestLifecycleIdempotency(t *testing.T) {
	e := newEnv(t, Config{})
	sb := e.running(e.bob, nil)
	for _, tc := range []struct{ path, body string }{
		{"/v1/sandboxes/" + sb.ID + "/checkpoints", `{"name":"a"}`},
		{"/v1/sandboxes/" + sb.ID + "/pause", ``},
	} {
		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		s1, h1, b1 := e.do("POST", tc.path, e.bobKey, body, "Idempotency-Key", tc.path, "Content-Type", "application/json")
		s2, h2, b2 := e.do("POST", tc.path, e.bobKey, body, "Idempotency-Key", tc.path, "Content-Type", "application/json")
		if s1 != 202 || s2 != 202 || string(b1) != string(b2) || h1.Get("Idempotent-Replayed") != "" || h2.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s: %d %s / %d %s", tc.path, s1, b1, s2, b2)
		}
	}
	ops, err := e.bob.ListOperations(t.Context(), sb.ID, client.Page{})
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, op := range ops.Operations {
		n[op.Type]++
	}
	if n["checkpoint"] != 1 || n["pause"] != 1 {
		t.Fatalf("operations: %v", n)
	}
}

func TestExpiryAndIdleSuspend(t *testing.T) {
	e := newEnv(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.srv.Run(ctx)
	exp, err := e.bob.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base", TimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := e.bob.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base", IdleTimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.waitFor(func() bool { return e.state(e.bob, exp.Sandbox.ID) == "deleted" })
	e.waitFor(func() bool { return e.state(e.bob, idle.Sandbox.ID) == "suspended" })
	for id, typ := range map[string]string{exp.Sandbox.ID: "delete", idle.Sandbox.ID: "suspend"} {
		// The operation records its success just after the state it set.
		e.waitFor(func() bool {
			ops, err := e.bob.ListOperations(ctx, id, client.Page{})
			return err == nil && len(ops.Operations) > 0 && ops.Operations[0].State == apiv1.OpSucceeded
		})
		ops, err := e.bob.ListOperations(ctx, id, client.Page{})
		if err != nil || len(ops.Operations) == 0 || ops.Operations[0].Type != typ {
			t.Fatalf("%s: newest operation %+v %v, want %s", id, ops, err, typ)
		}
	}
}

func TestReconcileInterruptedTransitions(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	cases := map[string]struct {
		store store.SandboxState
		vm    worker.VMState
		want  string
	}{
		"suspend done":      {store.SandboxSuspending, worker.VMSuspended, "suspended"},
		"suspend undone":    {store.SandboxSuspending, worker.VMRunning, "running"},
		"pause done":        {store.SandboxPausing, worker.VMPaused, "paused"},
		"wake done":         {store.SandboxWaking, worker.VMRunning, "running"},
		"still suspended":   {store.SandboxSuspended, worker.VMSuspended, "suspended"},
		"suspended vm gone": {store.SandboxSuspended, "", "failed"},
	}
	ids := map[string]string{}
	for name, tc := range cases {
		sb := e.running(e.bob, nil)
		ids[name] = sb.ID
		if tc.vm == "" {
			e.worker.DeleteSandbox(ctx, sb.ID)
		} else {
			e.worker.VM(sb.ID).State = tc.vm
		}
		if _, err := e.store.TransitionSandbox(ctx, store.AnyTenant, sb.ID, nil, tc.store, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.srv.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for name, tc := range cases {
		if got := e.state(e.bob, ids[name]); got != tc.want {
			t.Errorf("%s: %s, want %s", name, got, tc.want)
		}
	}
}

// A restore in place that would grow the sandbox to the checkpoint's size
// is refused (429) when the growth does not fit the tenant's quota.
func TestRestoreChecksQuota(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	sb := e.running(e.bob, nil)
	ck, err := e.bob.CreateCheckpoint(ctx, sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	e.waitOp(e.bob, &ck.Operation, apiv1.OpSucceeded)
	row, err := e.store.GetSandbox(ctx, store.AnyTenant, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The checkpoint is of a bigger sandbox (as after a branch of another
	// size); the tenant may hold one vCPU and 256 MiB more than it does.
	resize := func(vcpus, mem int) {
		t.Helper()
		if _, err := e.store.UpdateCheckpoint(ctx, ck.Checkpoint.ID, nil, func(c *store.Checkpoint) error {
			c.VCPUs, c.MemoryMiB = vcpus, mem
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.SetTenantQuota(ctx, row.TenantID,
		store.Quota{MaxVCPUs: row.VCPUs + 1, MaxMemoryMiB: row.MemoryMiB + 256}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		vcpus, mem int
		resource   string
	}{
		{row.VCPUs + 2, row.MemoryMiB, "vcpus"},
		{row.VCPUs, row.MemoryMiB + 512, "memory_mib"},
	} {
		resize(c.vcpus, c.mem)
		status, _, body := e.do("POST", "/v1/sandboxes/"+sb.ID+"/restore", e.bobKey,
			[]byte(`{"checkpoint":"`+ck.Checkpoint.ID+`"}`))
		if got := wantError(t, status, body, 429, "resource_exhausted"); got.Details["resource"] != c.resource {
			t.Fatalf("restore to %d vCPU %d MiB: details %+v", c.vcpus, c.mem, got.Details)
		}
		if st := e.state(e.bob, sb.ID); st != "running" {
			t.Fatalf("sandbox after a refused restore: %s", st)
		}
	}
	// Growth that fits, and a shrink, are accepted.
	for _, size := range [][2]int{{row.VCPUs + 1, row.MemoryMiB + 256}, {row.VCPUs, row.MemoryMiB}} {
		resize(size[0], size[1])
		op, err := e.bob.RestoreSandbox(ctx, sb.ID, ck.Checkpoint.ID)
		if err != nil {
			t.Fatalf("restore to %v: %v", size, err)
		}
		e.waitOp(e.bob, op, apiv1.OpSucceeded)
	}
}
