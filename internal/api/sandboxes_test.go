package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

func TestSandboxLifecycle(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	res, err := e.alice.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base", Metadata: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.State != apiv1.SandboxCreating || res.Operation.Type != "create" || res.Operation.Target != res.Sandbox.ID {
		t.Fatalf("create answer: %+v", res)
	}
	op, err := e.alice.WaitOperation(ctx, res.Operation.ID)
	if err != nil || op.State != apiv1.OpSucceeded || op.DoneAt == nil {
		t.Fatalf("create op: %+v %v", op, err)
	}
	id := res.Sandbox.ID
	sb, err := e.alice.GetSandbox(ctx, id)
	if err != nil || sb.State != apiv1.SandboxRunning || sb.VCPUs != 1 || sb.MemoryMiB != 256 || sb.Metadata["team"] != "a" {
		t.Fatalf("get: %+v %v", sb, err)
	}

	// Another tenant sees nothing of it.
	if _, err := e.bob.GetSandbox(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("bob get: %v", err)
	}
	if _, err := e.bob.DeleteSandbox(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("bob delete: %v", err)
	}
	if _, err := e.bob.GetOperation(ctx, op.ID, 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("bob op: %v", err)
	}
	if l, _ := e.bob.ListSandboxes(ctx, client.SandboxFilter{}); len(l.Sandboxes) != 0 {
		t.Errorf("bob lists %d sandboxes", len(l.Sandboxes))
	}

	ops, err := e.alice.ListOperations(ctx, id, client.Page{})
	if err != nil || len(ops.Operations) != 1 || ops.Operations[0].ID != op.ID {
		t.Errorf("list ops: %+v %v", ops, err)
	}

	del, err := e.alice.DeleteSandbox(ctx, id)
	if err != nil || del.Type != "delete" {
		t.Fatalf("delete: %+v %v", del, err)
	}
	if d, err := e.alice.WaitOperation(ctx, del.ID); err != nil || d.State != apiv1.OpSucceeded {
		t.Fatalf("delete op: %+v %v", d, err)
	}
	sb, _ = e.alice.GetSandbox(ctx, id)
	if sb.State != apiv1.SandboxDeleted {
		t.Errorf("after delete: %s", sb.State)
	}
	if e.worker.VM(id) != nil {
		t.Error("VM still on the worker")
	}
	// Deleting again is a state conflict that names the state.
	_, err = e.alice.DeleteSandbox(ctx, id)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 409 || ce.Details["state"] != "deleted" {
		t.Errorf("second delete: %v", err)
	}
	// Deleted sandboxes are listed only on request.
	if l, _ := e.alice.ListSandboxes(ctx, client.SandboxFilter{}); len(l.Sandboxes) != 0 {
		t.Errorf("default list shows deleted: %+v", l.Sandboxes)
	}
	if l, _ := e.alice.ListSandboxes(ctx, client.SandboxFilter{State: "deleted"}); len(l.Sandboxes) != 1 {
		t.Errorf("state=deleted lists %d", len(l.Sandboxes))
	}
	ops, _ = e.alice.ListOperations(ctx, id, client.Page{})
	if len(ops.Operations) != 2 || ops.Operations[0].Type != "delete" {
		t.Errorf("operations not newest first: %+v", ops.Operations)
	}
}

func TestSandboxCreateFails(t *testing.T) {
	e := newEnv(t, Config{})
	e.worker.CreateErr = fmt.Errorf("qemu died at /var/lib/space/x: %w", errdefs.ErrUnavailable)
	ctx := t.Context()
	res, err := e.alice.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	op, _ := e.alice.WaitOperation(ctx, res.Operation.ID)
	if op.State != apiv1.OpFailed || op.Error == nil || op.Error.Code != "unavailable" {
		t.Fatalf("op: %+v", op)
	}
	sb, _ := e.alice.GetSandbox(ctx, res.Sandbox.ID)
	if sb.State != apiv1.SandboxFailed || sb.LastError == nil || sb.LastError.Code != "unavailable" {
		t.Fatalf("sandbox: %+v", sb)
	}
	if b, _ := json.Marshal(sb); containsAny(string(b), "/var/lib", "qemu") {
		t.Errorf("host detail leaked: %s", b)
	}
	if len(e.worker.Deleted) != 1 {
		t.Errorf("worker cleanup calls: %v", e.worker.Deleted)
	}
	// A failed sandbox can be deleted.
	del, err := e.alice.DeleteSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := e.alice.WaitOperation(ctx, del.ID); d.State != apiv1.OpSucceeded {
		t.Errorf("delete failed sandbox: %+v", d)
	}
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if len(x) > 0 && len(s) >= len(x) && indexOf(s, x) >= 0 {
			return true
		}
	}
	return false
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestQuota(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	for i := 0; i < 3; i++ {
		if _, err := e.alice.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.alice.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base"})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 429 || !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("4th sandbox: %v", err)
	}
}

func TestStateConflicts(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	gate := make(chan struct{})
	e.worker.Gate = gate
	res, err := e.alice.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	tests := []struct {
		name   string
		call   func() error
		status int
		state  string
	}{
		{"delete while creating", func() error { _, err := e.alice.DeleteSandbox(ctx, id); return err }, 409, "creating"},
		{"pause while creating", func() error { _, err := e.alice.PauseSandbox(ctx, id); return err }, 409, "creating"},
		{"wake while creating", func() error { _, err := e.alice.WakeSandbox(ctx, id); return err }, 409, "creating"},
		{"command while creating", func() error {
			_, err := e.alice.CreateCommand(ctx, id, apiv1.CreateCommandRequest{Argv: []string{"true"}})
			return err
		}, 409, "creating"},
	}
	for _, tt := range tests {
		var ce *client.Error
		if err := tt.call(); !errors.As(err, &ce) || ce.Status != tt.status || ce.Details["state"] != tt.state {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	close(gate)
	e.alice.WaitOperation(ctx, res.Operation.ID)
	// Running: wake is a state conflict (lifecycle_test.go covers the rest).
	var ce *client.Error
	if _, err := e.alice.WakeSandbox(ctx, id); !errors.As(err, &ce) || ce.Status != 409 || ce.Details["state"] != "running" {
		t.Errorf("wake running: %v", err)
	}
	sb, err := e.alice.KeepSandbox(ctx, id, 600)
	if err != nil || sb.ExpiresAt == nil || time.Until(*sb.ExpiresAt) < 500*time.Second {
		t.Errorf("keep: %+v %v", sb, err)
	}
}

func TestListPaginationAndMetadata(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	for i := 0; i < 5; i++ {
		e.running(e.bob, map[string]string{"n": fmt.Sprint(i), "kind": map[bool]string{true: "even", false: "odd"}[i%2 == 0]})
	}
	seen := map[string]bool{}
	var pages int
	f := client.SandboxFilter{Page: client.Page{Size: 2}}
	for {
		l, err := e.bob.ListSandboxes(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, sb := range l.Sandboxes {
			if seen[sb.ID] {
				t.Errorf("%s listed twice", sb.ID)
			}
			seen[sb.ID] = true
		}
		if l.NextPageToken == "" {
			break
		}
		f.Token = l.NextPageToken
	}
	if len(seen) != 5 || pages != 3 {
		t.Errorf("listed %d sandboxes on %d pages", len(seen), pages)
	}
	l, err := e.bob.ListSandboxes(ctx, client.SandboxFilter{Metadata: map[string]string{"kind": "even"}, State: "running"})
	if err != nil || len(l.Sandboxes) != 3 {
		t.Errorf("metadata filter: %d %v", len(l.Sandboxes), err)
	}
	status, _, body := e.do("GET", "/v1/sandboxes?state=bogus", e.bobKey, nil)
	wantError(t, status, body, 400, "invalid_argument")
	status, _, body = e.do("GET", "/v1/sandboxes?page_size=-1", e.bobKey, nil)
	wantError(t, status, body, 400, "invalid_argument")
}

func TestIdempotency(t *testing.T) {
	e := newEnv(t, Config{})
	body := []byte(`{"template":"base"}`)
	s1, h1, b1 := e.do("POST", "/v1/sandboxes", e.bobKey, body, "Idempotency-Key", "k1", "Content-Type", "application/json")
	s2, h2, b2 := e.do("POST", "/v1/sandboxes", e.bobKey, body, "Idempotency-Key", "k1", "Content-Type", "application/json")
	if s1 != 202 || s2 != 202 || string(b1) != string(b2) {
		t.Fatalf("replay: %d %s / %d %s", s1, b1, s2, b2)
	}
	if h1.Get("Idempotent-Replayed") != "" || h2.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay headers: %q %q", h1.Get("Idempotent-Replayed"), h2.Get("Idempotent-Replayed"))
	}
	l, _ := e.bob.ListSandboxes(t.Context(), client.SandboxFilter{})
	if len(l.Sandboxes) != 1 {
		t.Errorf("acted %d times", len(l.Sandboxes))
	}
	s3, _, b3 := e.do("POST", "/v1/sandboxes", e.bobKey, []byte(`{"template":"other"}`), "Idempotency-Key", "k1", "Content-Type", "application/json")
	wantError(t, s3, b3, 409, "conflict")
	// Keys are per tenant: alice's k1 is another key.
	s4, _, _ := e.do("POST", "/v1/sandboxes", e.aliceKey, body, "Idempotency-Key", "k1", "Content-Type", "application/json")
	if s4 != 202 {
		t.Errorf("alice with bob's key name: %d", s4)
	}
}

func TestVMExitFailsSandbox(t *testing.T) {
	for _, tc := range []struct {
		name, code, msg string
		err             error
		lost            string
	}{
		{"crash", "unavailable", "stopped unexpectedly", errors.New("console: kernel panic"), ""},
		{"worker lost", "unavailable", "the worker running the sandbox was lost",
			errors.New("node space-a NotReady: pod evicted"), "the worker running the sandbox was lost"},
		{"memory limit", "resource_exhausted", "more host memory",
			fmt.Errorf("vmm exited: %w", errdefs.New(errdefs.ErrResourceExhausted, "qemu: vmm killed by its memory limit")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { e.srv.Run(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
			sb := e.running(e.alice, nil)
			cmd, err := e.alice.CreateCommand(ctx, sb.ID, apiv1.CreateCommandRequest{Argv: []string{"sleep", "60"}})
			if err != nil {
				t.Fatal(err)
			}
			e.worker.DeleteSandbox(ctx, sb.ID)
			if tc.lost != "" {
				e.worker.Lose(sb.ID, tc.err, tc.lost)
			} else {
				e.worker.Exit(sb.ID, tc.err)
			}
			var got *apiv1.Sandbox
			for deadline := time.Now().Add(30 * time.Second); ; {
				if time.Now().After(deadline) {
					t.Fatalf("sandbox still %s 30s after its VM exit", got.State)
				}
				got, err = e.alice.GetSandbox(ctx, sb.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.State == apiv1.SandboxFailed {
					break
				}
				pollPause()
			}
			if got.LastError == nil || got.LastError.Code != tc.code || !strings.Contains(got.LastError.Message, tc.msg) {
				t.Errorf("last_error %+v, want %s (%q)", got.LastError, tc.code, tc.msg)
			}
			c, err := e.alice.GetCommand(ctx, sb.ID, cmd.ID)
			if err != nil || c.State != apiv1.CommandExited || c.Exit == nil || c.Exit.Reason != "lost" {
				t.Errorf("command after VM exit: %+v %v", c, err)
			}
		})
	}
}

func TestReconcile(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	sb := e.running(e.alice, nil)
	gone := e.running(e.alice, nil)
	e.worker.DeleteSandbox(ctx, gone.ID)
	// A sandbox stuck in creating with no operation, as a crash leaves it.
	stuck := &store.Sandbox{ID: store.NewID(store.PrefixSandbox), TenantID: tenantOf(t, e, sb.ID), Template: "base",
		State: store.SandboxCreating, VCPUs: 1, MemoryMiB: 256, Metadata: map[string]string{}, CreatedAt: time.Now()}
	if err := e.store.CreateSandbox(ctx, stuck); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{sb.ID: "running", gone.ID: "failed", stuck.ID: "failed"} {
		got, _ := e.alice.GetSandbox(ctx, id)
		if got.State != want {
			t.Errorf("%s: %s, want %s", id, got.State, want)
		}
	}
}

func tenantOf(t *testing.T, e *env, id string) string {
	sb, err := e.store.GetSandbox(t.Context(), store.AnyTenant, id)
	if err != nil {
		t.Fatal(err)
	}
	return sb.TenantID
}

// A checkpoint a restart interrupted ends failed, its files gone, and can be
// deleted (it stayed creating for ever, 409 to every call).
func TestReconcileInterruptedCheckpoint(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := t.Context()
	sb := e.running(e.alice, nil)
	stuck := &store.Checkpoint{ID: store.NewID(store.PrefixCheckpoint), TenantID: tenantOf(t, e, sb.ID), SandboxID: sb.ID,
		State: store.CheckpointCreating, Template: "base", VCPUs: 1, MemoryMiB: 256, CreatedAt: time.Now()}
	if err := e.store.CreateCheckpoint(ctx, stuck); err != nil {
		t.Fatal(err)
	}
	// The worker had sealed its files before the crash.
	if _, err := e.worker.Checkpoint(ctx, sb.ID, stuck.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.alice.DeleteCheckpoint(ctx, stuck.ID); errdefs.ClassOf(err) != errdefs.ErrConflict {
		t.Fatalf("delete while creating: %v, want conflict", err)
	}
	if err := e.srv.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := e.alice.GetCheckpoint(ctx, stuck.ID)
	if err != nil || got.State != "failed" {
		t.Fatalf("after reconcile: %+v, %v; want failed", got, err)
	}
	cks, err := e.worker.Checkpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cks {
		if c.ID == stuck.ID {
			t.Fatal("the worker still holds the interrupted checkpoint's files")
		}
	}
	if err := e.alice.DeleteCheckpoint(ctx, stuck.ID); err != nil {
		t.Fatalf("delete failed checkpoint: %v", err)
	}
	if s, _ := e.alice.GetSandbox(ctx, sb.ID); s.State != "running" {
		t.Fatalf("sandbox %s after reconcile, want running", s.State)
	}
}
