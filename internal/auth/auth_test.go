package auth_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/sqlite"
)

func openStore(t *testing.T) store.Store {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestGenerateKey(t *testing.T) {
	k1, err := auth.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := auth.GenerateKey()
	if !strings.HasPrefix(k1, auth.KeyPrefix) || len(k1) != len(auth.KeyPrefix)+52 || k1 == k2 {
		t.Fatalf("keys %q %q", k1, k2)
	}
	if auth.HashKey(k1) == auth.HashKey(k2) || len(auth.HashKey(k1)) != 64 {
		t.Fatal("bad hashes")
	}
	if p := auth.DisplayPrefix(k1); !strings.HasPrefix(k1, p) || len(p) >= len(k1)/2 {
		t.Fatalf("display prefix %q shows too much or is wrong", p)
	}
}

func TestTokenFromHeader(t *testing.T) {
	for _, tc := range []struct {
		in, tok string
		ok      bool
	}{
		{"Bearer space_abc", "space_abc", true},
		{"bearer  space_abc ", "space_abc", true},
		{"Basic dXNlcg==", "", false},
		{"Bearer", "", false},
		{"", "", false},
		{"Bearer ", "", false},
	} {
		tok, ok := auth.TokenFromHeader(tc.in)
		if tok != tc.tok || ok != tc.ok {
			t.Errorf("TokenFromHeader(%q) = %q, %v; want %q, %v", tc.in, tok, ok, tc.tok, tc.ok)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	var logs bytes.Buffer
	a := auth.New(s, slog.New(slog.NewTextHandler(&logs, nil)))
	tn := &store.Tenant{Name: "t1"}
	if err := s.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	secret, key, err := a.CreateKey(ctx, tn.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if key.Hash != auth.HashKey(secret) || key.Prefix != auth.DisplayPrefix(secret) {
		t.Fatalf("stored key %+v does not match the secret", key)
	}
	p, err := a.Authenticate(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	if p != (auth.Principal{TenantID: tn.ID, KeyID: key.ID}) {
		t.Fatalf("principal %+v", p)
	}
	other, _ := auth.GenerateKey()
	for _, bad := range []string{"", "space_", other, secret + "x", strings.TrimPrefix(secret, "space_"), strings.Repeat("space_", 100)} {
		_, err := a.Authenticate(ctx, bad)
		if errdefs.ClassOf(err) != errdefs.ErrUnauthenticated {
			t.Fatalf("Authenticate(bad) = %v, want unauthenticated", err)
		}
		if strings.Contains(err.Error(), secret) || (bad != "" && strings.Contains(err.Error(), bad)) {
			t.Fatalf("error %q echoes a credential", err)
		}
	}
	if err := s.RevokeAPIKey(ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, secret); errdefs.ClassOf(err) != errdefs.ErrUnauthenticated {
		t.Fatalf("revoked key: %v, want unauthenticated", err)
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatal("a secret reached the log")
	}

	ctx2 := auth.WithPrincipal(ctx, p)
	if got, ok := auth.FromContext(ctx2); !ok || got != p {
		t.Fatalf("FromContext = %+v, %v", got, ok)
	}
	if _, ok := auth.FromContext(ctx); ok {
		t.Fatal("FromContext on a bare context")
	}
}

func TestEnsureAdmin(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	var logs bytes.Buffer
	a := auth.New(s, slog.New(slog.NewTextHandler(&logs, nil)))
	dir := filepath.Join(t.TempDir(), "data")

	path, created, err := a.EnsureAdmin(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !created || path != filepath.Join(dir, auth.AdminKeyFile) {
		t.Fatalf("first EnsureAdmin = %q, %v", path, created)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("admin.key mode %v, want 0600", st.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	secret := strings.TrimSpace(string(b))
	p, err := a.Authenticate(ctx, secret)
	if err != nil || !p.Admin {
		t.Fatalf("admin key authenticates as %+v, %v", p, err)
	}
	tn, err := s.GetTenantByName(ctx, auth.AdminTenant)
	if err != nil || tn.ID != p.TenantID {
		t.Fatalf("admin tenant %+v, %v", tn, err)
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatal("the admin secret reached the log")
	}

	// Second start: nothing changes.
	_, created, err = a.EnsureAdmin(ctx, dir)
	if err != nil || created {
		t.Fatalf("second EnsureAdmin created=%v err=%v", created, err)
	}
	b2, _ := os.ReadFile(path)
	if !bytes.Equal(b, b2) {
		t.Fatal("second EnsureAdmin rewrote the key")
	}

	// A fresh database with the old file: a new key replaces the stale one.
	s2 := openStore(t)
	a2 := auth.New(s2, nil)
	_, created, err = a2.EnsureAdmin(ctx, dir)
	if err != nil || !created {
		t.Fatalf("EnsureAdmin over a stale file: created=%v err=%v", created, err)
	}
	b3, _ := os.ReadFile(path)
	if bytes.Equal(b, b3) {
		t.Fatal("stale key kept")
	}
	if p, err := a2.Authenticate(ctx, strings.TrimSpace(string(b3))); err != nil || !p.Admin {
		t.Fatalf("new admin key: %+v, %v", p, err)
	}
	keys, _ := s2.ListAPIKeys(ctx, store.AnyTenant)
	if len(keys) != 1 {
		t.Fatalf("%d keys after one bootstrap", len(keys))
	}
}

func TestE2BKeyFormat(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	a := auth.New(s, nil)
	tn := &store.Tenant{Name: "t-e2b"}
	if err := s.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	secret, _, err := a.CreateKeyFormat(ctx, tn.ID, false, auth.FormatE2B)
	if err != nil {
		t.Fatal(err)
	}
	// The form E2B's Python SDK requires: e2b_[0-9a-f]+.
	if !regexp.MustCompile(`^e2b_[0-9a-f]{64}$`).MatchString(secret) {
		t.Fatalf("e2b key %q", secret)
	}
	p, err := a.Authenticate(ctx, secret)
	if err != nil || p.TenantID != tn.ID {
		t.Fatalf("Authenticate(e2b key) = %+v, %v", p, err)
	}
	if _, err := a.Authenticate(ctx, "e2b_"+strings.Repeat("0", 64)); errdefs.ClassOf(err) != errdefs.ErrUnauthenticated {
		t.Fatalf("unknown e2b key: %v", err)
	}
	if _, _, err := a.CreateKeyFormat(ctx, tn.ID, false, "other"); errdefs.ClassOf(err) != errdefs.ErrInvalidArgument {
		t.Fatalf("unknown format: %v", err)
	}
}
