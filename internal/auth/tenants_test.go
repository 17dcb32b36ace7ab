package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

func TestListingAndQuota(t *testing.T) {
	ctx := context.Background()
	a := auth.New(openStore(t), nil)
	tn := &store.Tenant{ID: store.NewID(store.PrefixTenant), Name: "alice", Quota: store.Quota{MaxSandboxes: 2}, CreatedAt: time.Now()}
	if err := a.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	_, space, err := a.CreateKeyFormat(ctx, tn.ID, false, auth.FormatSpace)
	if err != nil {
		t.Fatal(err)
	}
	_, e2b, err := a.CreateKeyFormat(ctx, tn.ID, false, auth.FormatE2B)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := a.ListKeys(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	formats := map[string]string{}
	for _, k := range ks {
		formats[k.ID] = auth.KeyFormat(k)
	}
	if len(ks) != 2 || formats[space.ID] != auth.FormatSpace || formats[e2b.ID] != auth.FormatE2B {
		t.Errorf("key formats %v", formats)
	}

	ti, err := a.UpdateQuota(ctx, tn.ID, func(q *store.Quota) { q.MaxVCPUs = 4 })
	if err != nil {
		t.Fatal(err)
	}
	if ti.Quota != (store.Quota{MaxSandboxes: 2, MaxVCPUs: 4}) || ti.Usage != (store.Usage{}) {
		t.Errorf("after UpdateQuota: %+v %+v", ti.Quota, ti.Usage)
	}
	ts, err := a.ListTenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].Name != "alice" || ts[0].Quota.MaxVCPUs != 4 {
		t.Errorf("ListTenants: %+v", ts)
	}
	if _, err := a.UpdateQuota(ctx, "ten_nope", func(*store.Quota) {}); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("UpdateQuota of an unknown tenant: %v", err)
	}
}
