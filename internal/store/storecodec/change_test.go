package storecodec

import (
	"errors"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

func TestCheckQuota(t *testing.T) {
	q := store.Quota{MaxSandboxes: 2, MaxVCPUs: 4}
	for _, c := range []struct {
		used, ask store.Usage
		fits      bool
	}{
		{store.Usage{Sandboxes: 1, VCPUs: 2}, store.Usage{Sandboxes: 1, VCPUs: 2}, true},
		{store.Usage{Sandboxes: 2}, store.Usage{Sandboxes: 1}, false},
		{store.Usage{VCPUs: 3}, store.Usage{VCPUs: 2}, false},
		{store.Usage{MemoryMiB: 1 << 20}, store.Usage{MemoryMiB: 1 << 20}, true}, // no memory limit
	} {
		err := CheckQuota(q, c.used, c.ask)
		if c.fits != (err == nil) || (err != nil && !errors.Is(err, errdefs.ErrResourceExhausted)) {
			t.Errorf("used %+v ask %+v: %v, want fits=%v", c.used, c.ask, err, c.fits)
		}
	}
}

func TestChangeSandboxKeepsIdentity(t *testing.T) {
	created := time.Unix(100, 0).UTC()
	sb := &store.Sandbox{ID: "sbx_1", TenantID: "ten_1", State: store.SandboxRunning, CreatedAt: created}
	err := ChangeSandbox(sb, []store.SandboxState{store.SandboxRunning}, store.SandboxPaused, func(s *store.Sandbox) error {
		s.ID, s.TenantID, s.CreatedAt, s.Worker = "sbx_2", "ten_2", time.Time{}, "w1"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "sbx_1" || sb.TenantID != "ten_1" || !sb.CreatedAt.Equal(created) || sb.Worker != "w1" || sb.State != store.SandboxPaused {
		t.Errorf("after the change: %+v", sb)
	}
	if sb.UpdatedAt.IsZero() || sb.Env == nil {
		t.Errorf("a changed sandbox is not what a read returns: updated %v, env %v", sb.UpdatedAt, sb.Env)
	}
	err = ChangeSandbox(sb, []store.SandboxState{store.SandboxRunning}, "", nil)
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("change from a state it is not in: %v, want conflict", err)
	}
}
