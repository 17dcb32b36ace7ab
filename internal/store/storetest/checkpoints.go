package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

func testCheckpoints(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a, b := mkTenant(t, s, "ck-a"), mkTenant(t, s, "ck-b")

	ck := &store.Checkpoint{TenantID: a.ID, SandboxID: "sbx_1", Name: "first", State: store.CheckpointCreating,
		Template: "base", TemplateDigest: "sha256:x", VCPUs: 1, MemoryMiB: 256, DiskMiB: 512, Worker: "local"}
	must(t, s.CreateCheckpoint(ctx, ck))
	if !store.HasPrefix(ck.ID, store.PrefixCheckpoint) || ck.CreatedAt.IsZero() {
		t.Fatalf("create did not fill id and created_at: %+v", ck)
	}
	got, err := s.GetCheckpoint(ctx, a.ID, ck.ID)
	must(t, err)
	if *got != *ck {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, ck)
	}
	got, err = s.GetCheckpoint(ctx, store.AnyTenant, ck.ID)
	must(t, err)
	if got.ID != ck.ID {
		t.Fatalf("AnyTenant get: %+v", got)
	}

	// Tenant scoping: b sees nothing of a's.
	_, err = s.GetCheckpoint(ctx, b.ID, ck.ID)
	wantClass(t, err, errdefs.ErrNotFound)
	wantClass(t, s.DeleteCheckpoint(ctx, b.ID, ck.ID), errdefs.ErrNotFound)
	page, err := s.ListCheckpoints(ctx, store.CheckpointFilter{TenantID: b.ID})
	must(t, err)
	if len(page.Items) != 0 {
		t.Fatalf("b lists a's checkpoints: %+v", page.Items)
	}

	// Compare-and-set on the state.
	up, err := s.UpdateCheckpoint(ctx, ck.ID, []store.CheckpointState{store.CheckpointCreating}, func(c *store.Checkpoint) error {
		c.State, c.SizeBytes = store.CheckpointReady, 4096
		c.TenantID, c.SandboxID = b.ID, "sbx_other" // ignored
		return nil
	})
	must(t, err)
	if up.State != store.CheckpointReady || up.SizeBytes != 4096 || up.TenantID != a.ID || up.SandboxID != "sbx_1" {
		t.Fatalf("update: %+v", up)
	}
	_, err = s.UpdateCheckpoint(ctx, ck.ID, []store.CheckpointState{store.CheckpointCreating}, nil)
	wantClass(t, err, errdefs.ErrConflict)
	var pub *errdefs.Public
	if !errors.As(err, &pub) || pub.Details["state"] != string(store.CheckpointReady) {
		t.Fatalf("conflict %v does not carry the current state in details", err)
	}
	_, err = s.UpdateCheckpoint(ctx, "ckpt_missing", nil, nil)
	wantClass(t, err, errdefs.ErrNotFound)

	// Listing: by sandbox, oldest first, paged.
	for i, sbx := range []string{"sbx_1", "sbx_2", "sbx_1"} {
		must(t, s.CreateCheckpoint(ctx, &store.Checkpoint{TenantID: a.ID, SandboxID: sbx, Name: string(rune('a' + i)),
			Parent: ck.ID, State: store.CheckpointReady}))
	}
	var ids []string
	var prev time.Time
	f := store.CheckpointFilter{TenantID: a.ID, SandboxID: "sbx_1", PageRequest: store.PageRequest{PageSize: 2}}
	for {
		page, err := s.ListCheckpoints(ctx, f)
		must(t, err)
		for _, c := range page.Items {
			if c.SandboxID != "sbx_1" || c.CreatedAt.Before(prev) {
				t.Fatalf("filter by sandbox, oldest first: %+v after %v", c, prev)
			}
			prev = c.CreatedAt
			ids = append(ids, c.ID)
		}
		if page.NextPageToken == "" {
			break
		}
		f.PageToken = page.NextPageToken
	}
	if len(ids) != 3 || ids[0] != ck.ID || ids[1] == ids[2] {
		t.Fatalf("list sbx_1: %v", ids)
	}
	all, err := s.ListCheckpoints(ctx, store.CheckpointFilter{TenantID: store.AnyTenant})
	must(t, err)
	if len(all.Items) != 4 {
		t.Fatalf("list all: %d items", len(all.Items))
	}

	// Atomic: a create inside a failed transaction is not kept.
	var rolled store.Checkpoint
	err = s.Atomic(ctx, func(ctx context.Context, tx store.Store) error {
		rolled = store.Checkpoint{TenantID: a.ID, SandboxID: "sbx_1", State: store.CheckpointCreating}
		if err := tx.CreateCheckpoint(ctx, &rolled); err != nil {
			return err
		}
		return errdefs.ErrConflict
	})
	wantClass(t, err, errdefs.ErrConflict)
	_, err = s.GetCheckpoint(ctx, a.ID, rolled.ID)
	wantClass(t, err, errdefs.ErrNotFound)

	_, err = s.GetCheckpoint(ctx, a.ID, "")
	wantClass(t, err, errdefs.ErrNotFound)
	wantClass(t, s.CreateCheckpoint(ctx, &store.Checkpoint{TenantID: a.ID}), errdefs.ErrInvalidArgument)
	wantClass(t, s.CreateCheckpoint(ctx, &store.Checkpoint{ID: ck.ID, TenantID: a.ID, SandboxID: "sbx_1",
		State: store.CheckpointReady}), errdefs.ErrConflict)

	must(t, s.DeleteCheckpoint(ctx, a.ID, ck.ID))
	wantClass(t, s.DeleteCheckpoint(ctx, a.ID, ck.ID), errdefs.ErrNotFound)
	_, err = s.GetCheckpoint(ctx, a.ID, ck.ID)
	wantClass(t, err, errdefs.ErrNotFound)
}
