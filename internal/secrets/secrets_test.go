package secrets

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/sqlite"
)

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func tenant(t *testing.T, st store.Store, name string) string {
	t.Helper()
	tn := &store.Tenant{Name: name}
	if err := st.CreateTenant(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	return tn.ID
}

func TestKeyFileCreatedPrivateAndStable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", KeyFile)
	k1, err := LoadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || len(k1) != KeySize {
		t.Fatalf("key file mode %v, %d bytes", fi.Mode().Perm(), len(k1))
	}
	k2, err := LoadKey(path)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("second load: %v (same key: %v)", err, bytes.Equal(k1, k2))
	}
	// A Kubernetes Secret volume with an fsGroup mounts it 0440: allowed.
	// Others reading it, or its group writing it, is refused.
	for _, tc := range []struct {
		mode fs.FileMode
		ok   bool
	}{{0o440, true}, {0o400, true}, {0o644, false}, {0o604, false}, {0o460, false}} {
		if err := os.Chmod(path, tc.mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadKey(path)
		if tc.ok && err != nil {
			t.Errorf("key of mode %v: %v", tc.mode, err)
		}
		if !tc.ok && errdefs.ClassOf(err) != errdefs.ErrFailedPrecondition {
			t.Errorf("key of mode %v: got %v, want failed precondition", tc.mode, err)
		}
	}
	bad := filepath.Join(t.TempDir(), KeyFile)
	if err := os.WriteFile(bad, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(bad); errdefs.ClassOf(err) != errdefs.ErrFailedPrecondition {
		t.Fatalf("short key: got %v", err)
	}
}

func TestRoundTripSealedAtRest(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	key, err := LoadKey(filepath.Join(t.TempDir(), KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(st, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := tenant(t, st, "a")
	const value = "sk-live-0123456789abcdef"
	info, created, err := svc.Put(ctx, a, "example", value)
	if err != nil || !created || info.Name != "example" || info.CreatedAt.IsZero() {
		t.Fatalf("put: %+v %v %v", info, created, err)
	}
	got, err := svc.Resolve(ctx, a, "example")
	if err != nil || got != value {
		t.Fatalf("resolve: %q %v", got, err)
	}
	rec, err := st.GetSecret(ctx, a, "example")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(rec.Sealed, []byte(value)) || bytes.Contains(rec.Sealed, []byte("0123456789")) {
		t.Fatal("the stored value holds the plaintext")
	}
	// Same value again seals differently (fresh nonce) and replaces.
	_, created, err = svc.Put(ctx, a, "example", value)
	if err != nil || created {
		t.Fatalf("replace: created=%v %v", created, err)
	}
	rec2, _ := st.GetSecret(ctx, a, "example")
	if bytes.Equal(rec.Sealed, rec2.Sealed) {
		t.Fatal("two seals of one value are equal: nonce reused")
	}
	list, err := svc.List(ctx, a)
	if err != nil || len(list) != 1 || list[0].Name != "example" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := svc.Delete(ctx, a, "example"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Resolve(ctx, a, "example"); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Fatalf("resolve after delete: %v", err)
	}
}

func TestWrongKeyAndMovedValueFail(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	k1 := bytes.Repeat([]byte{1}, KeySize)
	k2 := bytes.Repeat([]byte{2}, KeySize)
	s1, _ := New(st, k1, nil)
	s2, _ := New(st, k2, nil)
	a, b := tenant(t, st, "a"), tenant(t, st, "b")
	const value = "hunter2-secret-value"
	if _, _, err := s1.Put(ctx, a, "tok", value); err != nil {
		t.Fatal(err)
	}
	_, err := s2.Resolve(ctx, a, "tok")
	if errdefs.ClassOf(err) != errdefs.ErrDataLoss || strings.Contains(err.Error(), value) {
		t.Fatalf("wrong key: %v", err)
	}
	// A sealed value copied to another tenant or name does not open.
	rec, _ := st.GetSecret(ctx, a, "tok")
	if _, err := st.PutSecret(ctx, &store.Secret{TenantID: b, Name: "tok", Sealed: rec.Sealed}); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Resolve(ctx, b, "tok"); errdefs.ClassOf(err) != errdefs.ErrDataLoss {
		t.Fatalf("moved to another tenant: %v", err)
	}
	if _, err := st.PutSecret(ctx, &store.Secret{TenantID: a, Name: "other", Sealed: rec.Sealed}); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Resolve(ctx, a, "other"); errdefs.ClassOf(err) != errdefs.ErrDataLoss {
		t.Fatalf("moved to another name: %v", err)
	}
	// Tampered ciphertext fails.
	bad := append([]byte(nil), rec.Sealed...)
	bad[len(bad)-1] ^= 1
	_, _ = st.PutSecret(ctx, &store.Secret{TenantID: a, Name: "tok", Sealed: bad})
	if _, err := s1.Resolve(ctx, a, "tok"); errdefs.ClassOf(err) != errdefs.ErrDataLoss {
		t.Fatalf("tampered: %v", err)
	}
}

func TestValidation(t *testing.T) {
	st := openStore(t)
	svc, _ := New(st, bytes.Repeat([]byte{3}, KeySize), nil)
	a := tenant(t, st, "a")
	const value = "do-not-echo-me"
	for _, name := range []string{"", "-x", ".x", "a/b", "a b", strings.Repeat("x", 129), "${x}"} {
		_, _, err := svc.Put(context.Background(), a, name, value)
		if errdefs.ClassOf(err) != errdefs.ErrInvalidArgument {
			t.Fatalf("name %q: %v", name, err)
		}
		if strings.Contains(err.Error(), value) {
			t.Fatalf("error quotes the value: %v", err)
		}
	}
	for _, v := range []string{"", strings.Repeat("x", MaxValueBytes+1), "\xff\xfe"} {
		if _, _, err := svc.Put(context.Background(), a, "ok", v); errdefs.ClassOf(err) != errdefs.ErrInvalidArgument {
			t.Fatalf("value of %d bytes: %v", len(v), err)
		}
	}
}
