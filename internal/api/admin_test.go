package api

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
)

func TestAdminListingTenantKeyRefused(t *testing.T) {
	e := newEnv(t, Config{})
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/admin/tenants", ""},
		{"GET", "/v1/admin/tenants/alice/keys", ""},
		{"GET", "/v1/admin/tenants/nobody/keys", ""},
		{"PUT", "/v1/admin/tenants/alice/quotas", `{"sandboxes":100}`},
	} {
		var body []byte
		if r.body != "" {
			body = []byte(r.body)
		}
		status, _, b := e.do(r.method, r.path, e.aliceKey, body)
		wantError(t, status, b, 403, "permission_denied")
	}
	// The refused quota change changed nothing.
	l, err := e.admin.Tenants(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := tenantNamed(t, l, "alice").Quotas.Sandboxes; got != 3 {
		t.Errorf("alice's sandbox quota after a refused change: %d, want 3", got)
	}
}

func tenantNamed(t *testing.T, l *apiv1.TenantList, name string) apiv1.TenantInfo {
	t.Helper()
	for _, ti := range l.Tenants {
		if ti.Name == name {
			return ti
		}
	}
	t.Fatalf("tenant %q not in %+v", name, l.Tenants)
	return apiv1.TenantInfo{}
}

func TestAdminListTenants(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	e.running(e.alice, nil)
	l, err := e.admin.Tenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Tenants) != 3 || l.Tenants[0].Name != "admin" {
		t.Fatalf("tenants %+v, want admin, alice, bob oldest first", l.Tenants)
	}
	alice, bob := tenantNamed(t, l, "alice"), tenantNamed(t, l, "bob")
	if alice.Sandboxes != 1 || bob.Sandboxes != 0 {
		t.Errorf("sandbox counts alice %d bob %d, want 1 and 0", alice.Sandboxes, bob.Sandboxes)
	}
	if alice.Quotas != (apiv1.TenantQuotas{Sandboxes: 3}) || alice.ID == "" || alice.CreatedAt.IsZero() {
		t.Errorf("alice %+v", alice)
	}
}

func TestAdminListKeys(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	e2b, err := e.admin.CreateKeyFormat(ctx, "alice", false, "e2b")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := e.admin.CreateKeyFormat(ctx, "alice", true, "space")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.admin.DeleteKey(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	status, _, body := e.do("GET", "/v1/admin/tenants/alice/keys", e.adminKey, nil)
	if status != 200 {
		t.Fatalf("list keys: %d %s", status, body)
	}
	for _, secret := range []string{e.aliceKey, e2b.Key, gone.Key} {
		for _, leak := range []string{secret, auth.HashKey(secret), auth.DisplayPrefix(secret)} {
			if bytes.Contains(body, []byte(leak)) {
				t.Fatalf("key listing %s contains a key, its hash or its prefix", body)
			}
		}
	}
	var l apiv1.KeyList
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Keys) != 3 {
		t.Fatalf("keys %+v, want 3", l.Keys)
	}
	byID := map[string]apiv1.KeyInfo{}
	for _, k := range l.Keys {
		byID[k.ID] = k
	}
	if k := byID[e2b.ID]; k.Format != "e2b" || k.Admin || k.RevokedAt != nil || k.CreatedAt.IsZero() {
		t.Errorf("e2b key %+v", k)
	}
	if k := byID[gone.ID]; k.Format != "space" || !k.Admin || k.RevokedAt == nil {
		t.Errorf("revoked admin key %+v", k)
	}
	if k := l.Keys[0]; k.Format != "space" || k.RevokedAt != nil {
		t.Errorf("alice's first key %+v", k)
	}

	status, _, body = e.do("GET", "/v1/admin/tenants/nobody/keys", e.adminKey, nil)
	wantError(t, status, body, 404, "not_found")
}

func TestAdminSetQuotas(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	ti, err := e.admin.SetQuotas(ctx, "bob", apiv1.SetQuotasRequest{Sandboxes: new(int(1)), VCPUs: new(int(8))})
	if err != nil {
		t.Fatal(err)
	}
	if ti.Name != "bob" || ti.Quotas != (apiv1.TenantQuotas{Sandboxes: 1, VCPUs: 8}) {
		t.Fatalf("after set: %+v", ti)
	}
	// A field left out stays.
	if ti, err = e.admin.SetQuotas(ctx, "bob", apiv1.SetQuotasRequest{MemoryMiB: new(int(4096))}); err != nil {
		t.Fatal(err)
	}
	if ti.Quotas != (apiv1.TenantQuotas{Sandboxes: 1, VCPUs: 8, MemoryMiB: 4096}) {
		t.Fatalf("after a partial set: %+v", ti.Quotas)
	}
	// The new quota is the one enforced.
	e.running(e.bob, nil)
	if _, err := e.bob.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base"}); errdefs.ClassOf(err) != errdefs.ErrResourceExhausted {
		t.Fatalf("second sandbox over a quota of 1: %v", err)
	}
	if ti, err = e.admin.SetQuotas(ctx, "bob", apiv1.SetQuotasRequest{Sandboxes: new(int(0))}); err != nil || ti.Quotas.Sandboxes != 0 || ti.Sandboxes != 1 {
		t.Fatalf("back to unlimited: %+v %v", ti, err)
	}

	for _, bad := range []string{`{"sandboxes":-1}`, `{"vcpus":2147483648}`, `{"disk_mib":10}`, `{"sandboxes":"1"}`} {
		status, _, body := e.do("PUT", "/v1/admin/tenants/bob/quotas", e.adminKey, []byte(bad))
		wantError(t, status, body, 400, "invalid_argument")
	}
	status, _, body := e.do("PUT", "/v1/admin/tenants/nobody/quotas", e.adminKey, []byte(`{"sandboxes":1}`))
	wantError(t, status, body, 404, "not_found")
}
