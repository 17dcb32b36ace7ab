package storetest

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

func testOperations(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a, b := mkTenant(t, s, "a"), mkTenant(t, s, "b")
	op := &store.Operation{TenantID: a.ID, Type: store.OpCreate, Target: "sbx_1", Params: json.RawMessage(`{"x":1}`)}
	must(t, s.CreateOperation(ctx, op))
	if !store.HasPrefix(op.ID, store.PrefixOperation) || op.State != store.OpPending || op.CreatedAt.IsZero() {
		t.Fatalf("created operation not filled in: %+v", op)
	}
	got, err := s.GetOperation(ctx, a.ID, op.ID)
	must(t, err)
	if got.State != store.OpPending || string(got.Params) != `{"x":1}` || got.DoneAt != nil || !got.CreatedAt.Equal(op.CreatedAt) {
		t.Fatalf("GetOperation = %+v", got)
	}
	_, err = s.GetOperation(ctx, b.ID, op.ID)
	wantClass(t, err, errdefs.ErrNotFound)
	wantClass(t, s.CreateOperation(ctx, &store.Operation{TenantID: a.ID}), errdefs.ErrInvalidArgument)

	op2 := &store.Operation{TenantID: a.ID, Type: store.OpDelete, Target: "sbx_2"}
	must(t, s.CreateOperation(ctx, op2))
	unfinished, err := s.ListUnfinishedOperations(ctx)
	must(t, err)
	if len(unfinished) != 2 {
		t.Fatalf("unfinished = %d, want 2", len(unfinished))
	}

	got, err = s.TransitionOperation(ctx, op.ID, []store.OperationState{store.OpPending}, store.OpRunning, func(o *store.Operation) error {
		o.Progress = &store.Progress{Step: "boot", Percent: 50}
		return nil
	})
	must(t, err)
	if got.State != store.OpRunning || got.Progress == nil || got.Progress.Percent != 50 || got.DoneAt != nil {
		t.Fatalf("running op = %+v", got)
	}
	_, err = s.TransitionOperation(ctx, op.ID, []store.OperationState{store.OpPending}, store.OpCancelled, nil)
	wantClass(t, err, errdefs.ErrConflict)

	got, err = s.TransitionOperation(ctx, op.ID, []store.OperationState{store.OpRunning}, store.OpSucceeded, func(o *store.Operation) error {
		o.Result = json.RawMessage(`{"ok":true}`)
		return nil
	})
	must(t, err)
	if got.DoneAt == nil || string(got.Result) != `{"ok":true}` {
		t.Fatalf("succeeded op = %+v", got)
	}
	read, err := s.GetOperation(ctx, store.AnyTenant, op.ID)
	must(t, err)
	if read.State != store.OpSucceeded || read.DoneAt == nil || !read.DoneAt.Equal(*got.DoneAt) || read.Progress.Step != "boot" {
		t.Fatalf("read back %+v", read)
	}
	_, err = s.TransitionOperation(ctx, op2.ID, nil, store.OpFailed, func(o *store.Operation) error {
		o.Error = &store.ErrorInfo{Code: "aborted", Message: "m"}
		return nil
	})
	must(t, err)
	read, err = s.GetOperation(ctx, a.ID, op2.ID)
	must(t, err)
	if read.Error == nil || read.Error.Code != "aborted" {
		t.Fatalf("failed op read back %+v", read)
	}
	unfinished, err = s.ListUnfinishedOperations(ctx)
	must(t, err)
	if len(unfinished) != 0 {
		t.Fatalf("unfinished = %d, want 0", len(unfinished))
	}
	_, err = s.TransitionOperation(ctx, "op_nope", nil, store.OpFailed, nil)
	wantClass(t, err, errdefs.ErrNotFound)
}

func testOperationPagination(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a, b := mkTenant(t, s, "a"), mkTenant(t, s, "b")
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var want []string // newest first
	for i := range 5 {
		op := &store.Operation{TenantID: a.ID, Type: store.OpPause, Target: "sbx_t", CreatedAt: base.Add(time.Duration(i) * time.Minute)}
		must(t, s.CreateOperation(ctx, op))
		want = append([]string{op.ID}, want...)
	}
	must(t, s.CreateOperation(ctx, &store.Operation{TenantID: a.ID, Type: store.OpPause, Target: "sbx_other"}))
	must(t, s.CreateOperation(ctx, &store.Operation{TenantID: b.ID, Type: store.OpPause, Target: "sbx_t"}))

	var got []string
	tok := ""
	for {
		page, err := s.ListOperations(ctx, store.OperationFilter{TenantID: a.ID, Target: "sbx_t", PageRequest: store.PageRequest{PageSize: 2, PageToken: tok}})
		must(t, err)
		for _, op := range page.Items {
			got = append(got, op.ID)
		}
		if tok = page.NextPageToken; tok == "" {
			break
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("got %v, want newest first %v", got, want)
		}
	}
	all, err := s.ListOperations(ctx, store.OperationFilter{TenantID: a.ID})
	must(t, err)
	if len(all.Items) != 6 {
		t.Fatalf("tenant a has %d operations, want 6", len(all.Items))
	}
}

func testCommands(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a, b := mkTenant(t, s, "a"), mkTenant(t, s, "b")
	sb := mkSandbox(t, s, a.ID, nil)
	other := mkSandbox(t, s, a.ID, nil)
	c := &store.Command{TenantID: a.ID, SandboxID: sb.ID, Spec: json.RawMessage(`{"argv":["true"]}`)}
	must(t, s.CreateCommand(ctx, c))
	if !store.HasPrefix(c.ID, store.PrefixCommand) || c.State != store.CommandCreated || c.ProcessID != c.ID {
		t.Fatalf("created command not filled in: %+v", c)
	}
	// A command inherited by a branch keeps the process id it had in the parent.
	c2 := &store.Command{TenantID: a.ID, SandboxID: sb.ID, ProcessID: c.ID, Spec: json.RawMessage(`{}`)}
	must(t, s.CreateCommand(ctx, c2))
	if c2.ProcessID != c.ID || c2.ID == c.ID {
		t.Fatalf("inherited command %+v", c2)
	}
	must(t, s.CreateCommand(ctx, &store.Command{TenantID: a.ID, SandboxID: other.ID, Spec: json.RawMessage(`{}`)}))
	wantClass(t, s.CreateCommand(ctx, &store.Command{TenantID: a.ID, SandboxID: "sbx_nope"}), errdefs.ErrNotFound)

	got, err := s.GetCommand(ctx, a.ID, sb.ID, c.ID)
	must(t, err)
	if string(got.Spec) != `{"argv":["true"]}` || got.StartedAt != nil || got.Exit != nil || got.ProcessID != c.ID {
		t.Fatalf("GetCommand = %+v", got)
	}
	got2, err := s.GetCommand(ctx, a.ID, sb.ID, c2.ID)
	must(t, err)
	if got2.ProcessID != c.ID {
		t.Fatalf("GetCommand(inherited) process id %q, want %q", got2.ProcessID, c.ID)
	}
	for _, tc := range []struct{ tenant, sandbox string }{{b.ID, sb.ID}, {a.ID, other.ID}} {
		_, err = s.GetCommand(ctx, tc.tenant, tc.sandbox, c.ID)
		wantClass(t, err, errdefs.ErrNotFound)
	}

	page, err := s.ListCommands(ctx, store.CommandFilter{TenantID: a.ID, SandboxID: sb.ID, PageRequest: store.PageRequest{PageSize: 1}})
	must(t, err)
	if len(page.Items) != 1 || page.Items[0].ID != c.ID || page.NextPageToken == "" {
		t.Fatalf("first page %+v", page)
	}
	page, err = s.ListCommands(ctx, store.CommandFilter{TenantID: a.ID, SandboxID: sb.ID, PageRequest: store.PageRequest{PageSize: 1, PageToken: page.NextPageToken}})
	must(t, err)
	if len(page.Items) != 1 || page.Items[0].ID != c2.ID || page.Items[0].ProcessID != c.ID || page.NextPageToken != "" {
		t.Fatalf("second page %+v", page)
	}
	page, err = s.ListCommands(ctx, store.CommandFilter{TenantID: b.ID, SandboxID: sb.ID})
	must(t, err)
	if len(page.Items) != 0 {
		t.Fatalf("another tenant lists %d commands", len(page.Items))
	}

	started := time.Now()
	got, err = s.UpdateCommand(ctx, c.ID, []store.CommandState{store.CommandCreated}, func(c *store.Command) error {
		c.State, c.PID, c.StartedAt = store.CommandRunning, 42, &started
		c.ProcessID = "cmd_other" // ignored: the process id never changes
		return nil
	})
	must(t, err)
	if got.State != store.CommandRunning || got.PID != 42 || got.StartedAt == nil || got.ProcessID != c.ID {
		t.Fatalf("updated command %+v", got)
	}
	_, err = s.UpdateCommand(ctx, c.ID, []store.CommandState{store.CommandCreated}, func(c *store.Command) error {
		c.State = store.CommandRunning
		return nil
	})
	wantClass(t, err, errdefs.ErrConflict)
	_, err = s.UpdateCommand(ctx, c.ID, []store.CommandState{store.CommandRunning}, func(c *store.Command) error {
		c.State, c.Exit = store.CommandExited, json.RawMessage(`{"exit_code":0}`)
		return nil
	})
	must(t, err)
	got, err = s.GetCommand(ctx, a.ID, sb.ID, c.ID)
	must(t, err)
	if got.State != store.CommandExited || string(got.Exit) != `{"exit_code":0}` || got.PID != 42 || !got.StartedAt.Equal(started) || got.ProcessID != c.ID {
		t.Fatalf("exited command %+v", got)
	}
}

func testIdempotency(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a, b := mkTenant(t, s, "a"), mkTenant(t, s, "b")
	rec := &store.IdempotencyRecord{TenantID: a.ID, Key: "k1", RequestHash: "h1"}
	stored, inserted, err := s.PutIdempotencyRecord(ctx, rec)
	must(t, err)
	if !inserted || stored.RequestHash != "h1" || stored.Status != 0 {
		t.Fatalf("first put: inserted=%v %+v", inserted, stored)
	}
	stored, inserted, err = s.PutIdempotencyRecord(ctx, &store.IdempotencyRecord{TenantID: a.ID, Key: "k1", RequestHash: "h2"})
	must(t, err)
	if inserted || stored.RequestHash != "h1" {
		t.Fatalf("second put: inserted=%v %+v, want the first record", inserted, stored)
	}
	// Keys are per tenant.
	_, inserted, err = s.PutIdempotencyRecord(ctx, &store.IdempotencyRecord{TenantID: b.ID, Key: "k1", RequestHash: "h3"})
	must(t, err)
	if !inserted {
		t.Fatal("another tenant's same key was not inserted")
	}
	must(t, s.CompleteIdempotencyRecord(ctx, a.ID, "k1", 202, []byte(`{"id":"x"}`)))
	got, err := s.GetIdempotencyRecord(ctx, a.ID, "k1")
	must(t, err)
	if got.Status != 202 || !bytes.Equal(got.Body, []byte(`{"id":"x"}`)) || got.RequestHash != "h1" {
		t.Fatalf("completed record %+v", got)
	}
	wantClass(t, s.CompleteIdempotencyRecord(ctx, a.ID, "nope", 200, nil), errdefs.ErrNotFound)
	_, err = s.GetIdempotencyRecord(ctx, a.ID, "nope")
	wantClass(t, err, errdefs.ErrNotFound)

	must(t, s.DeleteIdempotencyRecord(ctx, a.ID, "k1"))
	must(t, s.DeleteIdempotencyRecord(ctx, a.ID, "k1"))
	_, err = s.GetIdempotencyRecord(ctx, a.ID, "k1")
	wantClass(t, err, errdefs.ErrNotFound)

	old := &store.IdempotencyRecord{TenantID: a.ID, Key: "old", RequestHash: "h", CreatedAt: time.Now().Add(-48 * time.Hour)}
	_, _, err = s.PutIdempotencyRecord(ctx, old)
	must(t, err)
	n, err := s.PruneIdempotencyRecords(ctx, time.Now().Add(-24*time.Hour))
	must(t, err)
	if n != 1 {
		t.Fatalf("pruned %d, want 1", n)
	}
	_, err = s.GetIdempotencyRecord(ctx, b.ID, "k1")
	must(t, err)
}

func testIdempotencyConcurrent(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "a")
	var wg sync.WaitGroup
	ins := make([]bool, 8)
	errs := make([]error, 8)
	for i := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ins[i], errs[i] = s.PutIdempotencyRecord(ctx, &store.IdempotencyRecord{TenantID: a.ID, Key: "same", RequestHash: "h"})
		}()
	}
	wg.Wait()
	n := 0
	for i := range ins {
		must(t, errs[i])
		if ins[i] {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d concurrent puts inserted, want 1", n)
	}
}

func testTemplates(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	v1 := &store.Template{Name: "base", Digest: "sha256:01", State: store.TemplateReady, SizeBytes: 10, CreatedAt: base,
		Defaults: json.RawMessage(`{"vcpus":1}`)}
	must(t, s.UpsertTemplate(ctx, v1))
	if !store.HasPrefix(v1.ID, store.PrefixTemplate) {
		t.Fatalf("template id %q", v1.ID)
	}
	v2 := &store.Template{Name: "base", State: store.TemplateBuilding, CreatedAt: base.Add(time.Hour)}
	must(t, s.UpsertTemplate(ctx, v2))
	other := &store.Template{Name: "py", State: store.TemplateBuilding, CreatedAt: base}
	must(t, s.UpsertTemplate(ctx, other))

	got, err := s.GetTemplateByName(ctx, "base", "")
	must(t, err)
	if got.ID != v1.ID || string(got.Defaults) != `{"vcpus":1}` || got.SizeBytes != 10 {
		t.Fatalf("newest ready base = %+v, want v1", got)
	}
	v2.State, v2.Digest, v2.SizeBytes = store.TemplateReady, "sha256:02", 20
	must(t, s.UpsertTemplate(ctx, v2))
	got, err = s.GetTemplateByName(ctx, "base", "")
	must(t, err)
	if got.ID != v2.ID || !got.CreatedAt.Equal(v2.CreatedAt) {
		t.Fatalf("newest ready base = %+v, want v2", got)
	}
	got, err = s.GetTemplateByName(ctx, "base", "sha256:01")
	must(t, err)
	if got.ID != v1.ID {
		t.Fatalf("base@sha256:01 = %s, want v1", got.ID)
	}
	_, err = s.GetTemplateByName(ctx, "py", "")
	wantClass(t, err, errdefs.ErrNotFound) // building only
	_, err = s.GetTemplateByName(ctx, "base", "sha256:ff")
	wantClass(t, err, errdefs.ErrNotFound)
	wantClass(t, s.UpsertTemplate(ctx, &store.Template{Name: "base", Digest: "sha256:01", State: store.TemplateReady}), errdefs.ErrConflict)

	got, err = s.GetTemplate(ctx, other.ID)
	must(t, err)
	if got.Name != "py" {
		t.Fatalf("GetTemplate = %+v", got)
	}
	all, err := s.ListTemplates(ctx)
	must(t, err)
	if len(all) != 3 {
		t.Fatalf("ListTemplates has %d, want 3", len(all))
	}
	// The owner round-trips; a rebuild that reuses a build (cache hit) may
	// move its row to a new id and time, which makes it the newest.
	owned := &store.Template{Name: "mine", TenantID: "ten_a", State: store.TemplateBuilding, CreatedAt: base}
	must(t, s.UpsertTemplate(ctx, owned))
	owned.State, owned.Digest, owned.CreatedAt = store.TemplateReady, "sha256:0a", base.Add(2*time.Hour)
	must(t, s.UpsertTemplate(ctx, owned))
	got, err = s.GetTemplateByName(ctx, "mine", "")
	must(t, err)
	if got.TenantID != "ten_a" || !got.CreatedAt.Equal(owned.CreatedAt) {
		t.Fatalf("owned template = %+v, want tenant ten_a created %v", got, owned.CreatedAt)
	}
	got, err = s.GetTemplate(ctx, v1.ID)
	must(t, err)
	if got.TenantID != "" {
		t.Fatalf("global template has tenant %q", got.TenantID)
	}
	must(t, s.DeleteTemplate(ctx, owned.ID))

	must(t, s.DeleteTemplate(ctx, other.ID))
	wantClass(t, s.DeleteTemplate(ctx, other.ID), errdefs.ErrNotFound)
	_, err = s.GetTemplate(ctx, other.ID)
	wantClass(t, err, errdefs.ErrNotFound)
}
