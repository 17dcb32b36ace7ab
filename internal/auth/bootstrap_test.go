package auth_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
)

func TestRegisterAdminKey(t *testing.T) {
	ctx := context.Background()
	db := openStore(t)
	var logs bytes.Buffer
	a := auth.New(db, slog.New(slog.NewTextHandler(&logs, nil)))
	secret := "space_" + strings.Repeat("k", 40)
	path := filepath.Join(t.TempDir(), "admin-key")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	// Replicas register it at once; one key results, and it is an admin's.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = a.RegisterAdminKey(ctx, path) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("RegisterAdminKey: %v", err)
		}
	}
	p, err := a.Authenticate(ctx, secret)
	if err != nil || !p.Admin {
		t.Fatalf("registered key: %+v, %v", p, err)
	}
	tenant, err := db.GetTenantByName(ctx, auth.AdminTenant)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := db.ListAPIKeys(ctx, tenant.ID)
	if err != nil || len(keys) != 1 {
		t.Fatalf("admin keys = %d, %v; want 1", len(keys), err)
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatal("the key is in the log")
	}

	// A revoked key stays revoked.
	if err := db.RevokeAPIKey(ctx, keys[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := a.RegisterAdminKey(ctx, path); errdefs.ClassOf(err) != errdefs.ErrFailedPrecondition {
		t.Fatalf("revoked key registered again: %v", err)
	}

	// A tenant's key is not made an admin's.
	tenantKey, _, err := a.CreateKey(ctx, tenant.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(tenantKey), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.RegisterAdminKey(ctx, path); errdefs.ClassOf(err) != errdefs.ErrFailedPrecondition {
		t.Fatalf("tenant key made admin: %v", err)
	}

	for name, tc := range map[string]struct {
		content string
		mode    os.FileMode
	}{
		"short":          {"space_abc", 0o600},
		"other prefix":   {"e2b_" + strings.Repeat("a", 40), 0o600},
		"two words":      {"space_" + strings.Repeat("a", 20) + " " + strings.Repeat("b", 20), 0o600},
		"world readable": {"space_" + strings.Repeat("c", 40), 0o644},
	} {
		p := filepath.Join(t.TempDir(), "key")
		if err := os.WriteFile(p, []byte(tc.content), tc.mode); err != nil {
			t.Fatal(err)
		}
		err := a.RegisterAdminKey(ctx, p)
		if errdefs.ClassOf(err) != errdefs.ErrFailedPrecondition {
			t.Errorf("%s: %v, want failed_precondition", name, err)
		} else if strings.Contains(err.Error(), tc.content) {
			t.Errorf("%s: the error repeats the key: %v", name, err)
		}
	}

	// A missing file gets a new key, written once however many replicas
	// race; every one registers the same key.
	missing := filepath.Join(t.TempDir(), "missing")
	for i := range errs {
		wg.Go(func() { errs[i] = a.RegisterAdminKey(ctx, missing) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("RegisterAdminKey of a missing file: %v", err)
		}
	}
	b, err := os.ReadFile(missing)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(missing); fi.Mode().Perm() != 0o600 {
		t.Errorf("new key file mode %v", fi.Mode().Perm())
	}
	if p, err := a.Authenticate(ctx, strings.TrimSpace(string(b))); err != nil || !p.Admin {
		t.Fatalf("new key: %+v, %v", p, err)
	}
	if keys, _ := db.ListAPIKeys(ctx, tenant.ID); len(keys) != 3 { // revoked, tenant's, new
		t.Fatalf("keys of the admin tenant = %d, want 3", len(keys))
	}
}
