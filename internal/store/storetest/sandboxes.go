package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

func testSandboxRoundTrip(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "a")
	exp := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	sb := mkSandbox(t, s, a.ID, func(sb *store.Sandbox) {
		sb.Env = map[string]string{"A": "1"}
		sb.Metadata = map[string]string{"team": "x", "dotted.key": "y"}
		sb.Network = json.RawMessage(`{"egress":{"default":"deny"}}`)
		sb.Worker = "local"
		sb.TimeoutSeconds, sb.IdleTimeoutSeconds = 600, 60
		sb.ExpiresAt = &exp
		sb.LastError = &store.ErrorInfo{Code: "internal", Message: "m"}
	})
	if !store.HasPrefix(sb.ID, store.PrefixSandbox) || sb.CreatedAt.IsZero() || sb.UpdatedAt.IsZero() || sb.LastActivityAt.IsZero() {
		t.Fatalf("created sandbox not filled in: %+v", sb)
	}
	got, err := s.GetSandbox(ctx, a.ID, sb.ID)
	must(t, err)
	sameSandbox(t, got, sb)
	if got.CreatedAt.Location() != time.UTC {
		t.Fatalf("CreatedAt not UTC: %v", got.CreatedAt)
	}
	got, err = s.GetSandbox(ctx, store.AnyTenant, sb.ID)
	must(t, err)
	sameSandbox(t, got, sb)

	// Empty maps come back as empty maps, not nil, so JSON shows {}.
	plain := mkSandbox(t, s, a.ID, nil)
	got, err = s.GetSandbox(ctx, a.ID, plain.ID)
	must(t, err)
	if got.Metadata == nil || got.Env == nil || got.Network != nil || got.ExpiresAt != nil || got.LastError != nil {
		t.Fatalf("plain sandbox read back as %+v", got)
	}
	sameSandbox(t, got, plain)

	wantClass(t, s.CreateSandbox(ctx, &store.Sandbox{TenantID: a.ID, ID: sb.ID, State: store.SandboxRunning}), errdefs.ErrConflict)
	wantClass(t, s.CreateSandbox(ctx, &store.Sandbox{TenantID: "ten_nope", State: store.SandboxRunning}), errdefs.ErrNotFound)
}

func testSandboxIsolation(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a, b := mkTenant(t, s, "a"), mkTenant(t, s, "b")
	sa := mkSandbox(t, s, a.ID, nil)
	mkSandbox(t, s, b.ID, nil)

	_, err := s.GetSandbox(ctx, b.ID, sa.ID)
	wantClass(t, err, errdefs.ErrNotFound)
	_, err = s.TransitionSandbox(ctx, b.ID, sa.ID, nil, store.SandboxDeleting, nil)
	wantClass(t, err, errdefs.ErrNotFound)
	got, err := s.GetSandbox(ctx, a.ID, sa.ID)
	must(t, err)
	if got.State != store.SandboxRunning {
		t.Fatalf("another tenant changed the sandbox to %s", got.State)
	}
	page, err := s.ListSandboxes(ctx, store.SandboxFilter{TenantID: b.ID})
	must(t, err)
	if len(page.Items) != 1 || page.Items[0].TenantID != b.ID {
		t.Fatalf("tenant b lists %v", page.Items)
	}
	page, err = s.ListSandboxes(ctx, store.SandboxFilter{})
	must(t, err)
	if len(page.Items) != 2 {
		t.Fatalf("AnyTenant lists %d sandboxes, want 2", len(page.Items))
	}
	// A command cannot go into another tenant's sandbox.
	wantClass(t, s.CreateCommand(ctx, &store.Command{TenantID: b.ID, SandboxID: sa.ID, Spec: json.RawMessage(`{}`)}), errdefs.ErrNotFound)
}

func testSandboxTransition(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "a")
	sb := mkSandbox(t, s, a.ID, func(sb *store.Sandbox) { sb.State = store.SandboxCreating })

	got, err := s.TransitionSandbox(ctx, a.ID, sb.ID, []store.SandboxState{store.SandboxCreating}, store.SandboxRunning,
		func(sb *store.Sandbox) error {
			sb.Worker = "w1"
			sb.ID, sb.TenantID = "sbx_hijack", "ten_hijack" // must be ignored
			return nil
		})
	must(t, err)
	if got.State != store.SandboxRunning || got.Worker != "w1" || got.ID != sb.ID || got.TenantID != a.ID {
		t.Fatalf("transition result %+v", got)
	}
	if got.UpdatedAt.Before(sb.UpdatedAt) {
		t.Fatalf("UpdatedAt went back: %v < %v", got.UpdatedAt, sb.UpdatedAt)
	}
	read, err := s.GetSandbox(ctx, a.ID, sb.ID)
	must(t, err)
	sameSandbox(t, read, got)

	// Wrong state: conflict with the current state in details.
	_, err = s.TransitionSandbox(ctx, a.ID, sb.ID, []store.SandboxState{store.SandboxPaused}, store.SandboxWaking, nil)
	wantClass(t, err, errdefs.ErrConflict)
	var pub *errdefs.Public
	if !errors.As(err, &pub) || pub.Details["state"] != string(store.SandboxRunning) {
		t.Fatalf("conflict %v does not carry the current state in details", err)
	}

	// Empty to keeps the state; a mutate error aborts with nothing written.
	boom := errors.New("boom")
	_, err = s.TransitionSandbox(ctx, a.ID, sb.ID, nil, "", func(sb *store.Sandbox) error {
		sb.Worker = "never"
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("mutate error = %v, want boom", err)
	}
	got, err = s.TransitionSandbox(ctx, a.ID, sb.ID, nil, "", func(sb *store.Sandbox) error {
		sb.Metadata["k"] = "v"
		return nil
	})
	must(t, err)
	if got.State != store.SandboxRunning || got.Worker != "w1" || got.Metadata["k"] != "v" {
		t.Fatalf("after keep-state update: %+v", got)
	}
	_, err = s.TransitionSandbox(ctx, a.ID, "sbx_nope", nil, store.SandboxDeleting, nil)
	wantClass(t, err, errdefs.ErrNotFound)
}

func testSandboxConcurrentTransition(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "a")
	sb := mkSandbox(t, s, a.ID, nil)
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = s.TransitionSandbox(ctx, a.ID, sb.ID, []store.SandboxState{store.SandboxRunning}, store.SandboxDeleting, nil)
		}()
	}
	close(start)
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case errdefs.ClassOf(err) != errdefs.ErrConflict:
			t.Fatalf("a losing transition failed with %v, want conflict", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d transitions won, want exactly 1", wins)
	}
}

func ids(items []*store.Sandbox) []string {
	out := make([]string, len(items))
	for i, sb := range items {
		out[i] = sb.ID
	}
	return out
}

func testSandboxListFilters(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "a")
	s1 := mkSandbox(t, s, a.ID, func(sb *store.Sandbox) { sb.Metadata = map[string]string{"env": "prod", "team": "x"} })
	s2 := mkSandbox(t, s, a.ID, func(sb *store.Sandbox) {
		sb.Metadata = map[string]string{"env": "dev", "team": "x"}
		sb.State = store.SandboxPaused
		sb.Worker = "w2"
	})
	s3 := mkSandbox(t, s, a.ID, func(sb *store.Sandbox) { sb.State = store.SandboxDeleted })
	for _, tc := range []struct {
		name string
		f    store.SandboxFilter
		want []string
	}{
		{"all", store.SandboxFilter{TenantID: a.ID}, []string{s1.ID, s2.ID, s3.ID}},
		{"state", store.SandboxFilter{TenantID: a.ID, States: []store.SandboxState{store.SandboxPaused}}, []string{s2.ID}},
		{"states", store.SandboxFilter{TenantID: a.ID, States: []store.SandboxState{store.SandboxRunning, store.SandboxDeleted}}, []string{s1.ID, s3.ID}},
		{"exclude", store.SandboxFilter{TenantID: a.ID, ExcludeStates: []store.SandboxState{store.SandboxDeleted}}, []string{s1.ID, s2.ID}},
		{"metadata one", store.SandboxFilter{TenantID: a.ID, Metadata: map[string]string{"team": "x"}}, []string{s1.ID, s2.ID}},
		{"metadata two", store.SandboxFilter{TenantID: a.ID, Metadata: map[string]string{"team": "x", "env": "dev"}}, []string{s2.ID}},
		{"metadata miss", store.SandboxFilter{TenantID: a.ID, Metadata: map[string]string{"env": "qa"}}, nil},
		{"metadata absent key", store.SandboxFilter{TenantID: a.ID, Metadata: map[string]string{"nokey": ""}}, nil},
		{"worker", store.SandboxFilter{TenantID: a.ID, Worker: "w2"}, []string{s2.ID}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page, err := s.ListSandboxes(ctx, tc.f)
			must(t, err)
			got := ids(page.Items)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
			if page.NextPageToken != "" {
				t.Fatalf("single page has a next token")
			}
		})
	}
}

func testSandboxPagination(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "a")
	// Equal creation times make the id the tie-breaker.
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var want []string
	for i := range 7 {
		sb := mkSandbox(t, s, a.ID, func(sb *store.Sandbox) { sb.CreatedAt = at.Add(time.Duration(i/3) * time.Second) })
		want = append(want, sb.ID)
	}
	var got []string
	tok := ""
	pages := 0
	for {
		page, err := s.ListSandboxes(ctx, store.SandboxFilter{TenantID: a.ID, PageRequest: store.PageRequest{PageSize: 3, PageToken: tok}})
		must(t, err)
		pages++
		if len(page.Items) > 3 {
			t.Fatalf("page of %d items, size 3", len(page.Items))
		}
		got = append(got, ids(page.Items)...)
		if page.NextPageToken == "" {
			break
		}
		tok = page.NextPageToken
		// Creating a newer one while paging must not disturb the pages.
		if pages == 1 {
			late := mkSandbox(t, s, a.ID, func(sb *store.Sandbox) { sb.CreatedAt = at.Add(time.Hour) })
			want = append(want, late.ID)
		}
	}
	if pages != 3 || len(got) != len(want) {
		t.Fatalf("pages=%d got %v, want %v", pages, got, want)
	}
	seen := map[string]bool{}
	for i := range got {
		if seen[got[i]] {
			t.Fatalf("duplicate %s across pages", got[i])
		}
		seen[got[i]] = true
		if i > 0 && !sortedBefore(t, s, a.ID, got[i-1], got[i]) {
			t.Fatalf("order broken at %d: %v", i, got)
		}
	}
	_, err := s.ListSandboxes(ctx, store.SandboxFilter{TenantID: a.ID, PageRequest: store.PageRequest{PageToken: "%%%not-a-token"}})
	wantClass(t, err, errdefs.ErrInvalidArgument)
}

// sortedBefore reports whether sandbox x sorts before y by (created_at, id).
func sortedBefore(t *testing.T, s store.Store, tenant, x, y string) bool {
	ctx := context.Background()
	a, err := s.GetSandbox(ctx, tenant, x)
	must(t, err)
	b, err := s.GetSandbox(ctx, tenant, y)
	must(t, err)
	return a.CreatedAt.Before(b.CreatedAt) || (a.CreatedAt.Equal(b.CreatedAt) && a.ID < b.ID)
}

func testQuota(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mkTenant(t, s, "a")
	must(t, s.SetTenantQuota(ctx, a.ID, store.Quota{MaxSandboxes: 3, MaxVCPUs: 4, MaxMemoryMiB: 1024}))
	one := mkSandbox(t, s, a.ID, func(sb *store.Sandbox) { sb.VCPUs, sb.MemoryMiB = 2, 256 })
	mkSandbox(t, s, a.ID, func(sb *store.Sandbox) { sb.VCPUs, sb.MemoryMiB = 1, 256 })

	u, err := s.SandboxUsage(ctx, a.ID)
	must(t, err)
	if u != (store.Usage{Sandboxes: 2, VCPUs: 3, MemoryMiB: 512}) {
		t.Fatalf("usage = %+v", u)
	}
	err = s.CreateSandbox(ctx, &store.Sandbox{TenantID: a.ID, State: store.SandboxCreating, VCPUs: 2, MemoryMiB: 128})
	wantClass(t, err, errdefs.ErrResourceExhausted)
	var pub *errdefs.Public
	if !errors.As(err, &pub) || pub.Details["resource"] != "vcpus" {
		t.Fatalf("quota error %v does not name the resource", err)
	}
	err = s.CreateSandbox(ctx, &store.Sandbox{TenantID: a.ID, State: store.SandboxCreating, VCPUs: 1, MemoryMiB: 1024})
	wantClass(t, err, errdefs.ErrResourceExhausted)
	// CheckQuota: growth of what is held (3 vCPUs, 512 MiB of 4, 1024).
	must(t, s.CheckQuota(ctx, a.ID, store.Usage{VCPUs: 1, MemoryMiB: 512}))
	wantClass(t, s.CheckQuota(ctx, a.ID, store.Usage{VCPUs: 2}), errdefs.ErrResourceExhausted)
	wantClass(t, s.CheckQuota(ctx, a.ID, store.Usage{MemoryMiB: 513}), errdefs.ErrResourceExhausted)
	mkSandbox(t, s, a.ID, func(sb *store.Sandbox) { sb.VCPUs, sb.MemoryMiB = 1, 256 })
	err = s.CreateSandbox(ctx, &store.Sandbox{TenantID: a.ID, State: store.SandboxCreating})
	wantClass(t, err, errdefs.ErrResourceExhausted)
	// At the sandbox limit, growth of the others still fits.
	must(t, s.CheckQuota(ctx, a.ID, store.Usage{MemoryMiB: 256}))

	// Deleted sandboxes stop counting.
	_, err = s.TransitionSandbox(ctx, a.ID, one.ID, nil, store.SandboxDeleted, nil)
	must(t, err)
	mkSandbox(t, s, a.ID, func(sb *store.Sandbox) { sb.VCPUs, sb.MemoryMiB = 2, 256 })

	// Concurrent creations never overshoot the quota.
	b := mkTenant(t, s, "b")
	must(t, s.SetTenantQuota(ctx, b.ID, store.Quota{MaxSandboxes: 2}))
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.CreateSandbox(ctx, &store.Sandbox{TenantID: b.ID, State: store.SandboxCreating, VCPUs: 1})
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else if errdefs.ClassOf(err) != errdefs.ErrResourceExhausted {
			t.Fatalf("concurrent create failed with %v", err)
		}
	}
	if ok != 2 {
		t.Fatalf("%d concurrent creations succeeded under a quota of 2", ok)
	}
}
