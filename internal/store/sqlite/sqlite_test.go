package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/sqlite"
	"github.com/space-sandbox/space/internal/store/storetest"
)

func open(t *testing.T) store.Store {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, open)
}

// TestReopen checks that data survives a close and that migrations run once.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "space.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	tn := &store.Tenant{Name: "keep"}
	if err := s.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	got, err := s.GetTenantByName(ctx, "keep")
	if err != nil || got.ID != tn.ID {
		t.Fatalf("after reopen: %v, %v", got, err)
	}
}

// TestOuterCallInsideAtomic checks that a call on the outer Store with the
// context Atomic hands out joins the transaction instead of deadlocking on
// the single writer connection.
func TestOuterCallInsideAtomic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := open(t)
	boom := errors.New("boom")
	err := s.Atomic(ctx, func(ctx context.Context, _ store.Store) error {
		if err := s.CreateTenant(ctx, &store.Tenant{Name: "inner"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Atomic = %v, want boom", err)
	}
	if _, err := s.GetTenantByName(ctx, "inner"); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Fatalf("tenant made by the rolled-back transaction: %v", err)
	}
}
