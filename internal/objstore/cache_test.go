package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
)

// TestCacheOneDownloadForConcurrentGets wakes eight sandboxes of one
// snapshot at once through the cache: one download, eight pinned handles
// on the same verified files.
func TestCacheOneDownloadForConcurrentGets(t *testing.T) {
	srv := sharedServer(t)
	s := openStore(t, srv, objstore.Options{})
	ctx := testCtx(t)
	dir, files := snapshotDir(t)
	if _, err := s.PutSnapshot(ctx, "sbx_4/suspend", dir, files); err != nil {
		t.Fatal(err)
	}
	c, err := objstore.OpenCache(t.TempDir(), 256*mib, nil)
	if err != nil {
		t.Fatal(err)
	}
	var downloads atomic.Int32
	fill := func(ctx context.Context, d string) error {
		downloads.Add(1)
		_, err := s.GetSnapshot(ctx, "sbx_4/suspend", d)
		return err
	}
	m, err := s.StatSnapshot(ctx, "sbx_4/suspend")
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	handles := make([]*objstore.Handle, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { handles[i], errs[i] = c.Get(ctx, "snapshots/sbx_4/suspend", m.DataBytes(), fill) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("get %d: %v", i, errs[i])
		}
		if handles[i].Dir != handles[0].Dir {
			t.Errorf("handle %d: dir %s, handle 0: %s", i, handles[i].Dir, handles[0].Dir)
		}
	}
	if d := downloads.Load(); d != 1 {
		t.Errorf("%d downloads for %d concurrent gets, want 1", d, n)
	}
	if st := c.Stats(); st.Fills != 1 || st.Pinned != 1 || st.Used > st.Max {
		t.Errorf("stats %+v", st)
	}
	for _, f := range files {
		if fileSum(t, filepath.Join(dir, f)) != fileSum(t, filepath.Join(handles[0].Dir, f)) {
			t.Errorf("cached %s differs", f)
		}
	}
	for _, h := range handles {
		h.Close()
		h.Close() // twice is safe
	}
	if st := c.Stats(); st.Pinned != 0 || st.Entries != 1 {
		t.Errorf("after close: %+v", st)
	}
	// A later get is a hit: no download.
	h, err := c.Get(ctx, "snapshots/sbx_4/suspend", m.DataBytes(), fill)
	if err != nil || downloads.Load() != 1 {
		t.Errorf("later get: %v, %d downloads", err, downloads.Load())
	}
	h.Close()

	// The same through the store's own entry point, in a fresh cache.
	c2, err := objstore.OpenCache(t.TempDir(), 256*mib, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		wg.Go(func() { handles[i], _, errs[i] = s.CachedSnapshot(ctx, c2, "sbx_4/suspend") })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("CachedSnapshot %d: %v", i, errs[i])
		}
	}
	if st := c2.Stats(); st.Fills != 1 || st.Hits+st.Fills > n || st.Pinned != 1 {
		t.Errorf("CachedSnapshot ×%d: stats %+v, want one fill", n, st)
	}
	if fileSum(t, filepath.Join(dir, "memory")) != fileSum(t, filepath.Join(handles[0].Dir, "memory")) {
		t.Error("cached memory differs")
	}
	for _, h := range handles {
		h.Close()
	}
}

// fillBytes is a fill that writes n bytes of data (not holes) to "data".
func fillBytes(n int, count *atomic.Int32) objstore.FillFunc {
	return func(ctx context.Context, dir string) error {
		count.Add(1)
		return os.WriteFile(filepath.Join(dir, "data"), randBytes(n), 0o600)
	}
}

func TestCacheEvictionKeepsBoundAndPins(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	const bound = 5 * mib
	c, err := objstore.OpenCache(dir, bound, nil)
	if err != nil {
		t.Fatal(err)
	}
	var fills atomic.Int32
	get := func(key string) *objstore.Handle {
		t.Helper()
		h, err := c.Get(ctx, key, mib+64*1024, fillBytes(mib, &fills))
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		if st := c.Stats(); st.Used > bound {
			t.Fatalf("after get %s: used %d over the bound %d", key, st.Used, bound)
		}
		return h
	}
	pinned := get("pinned")
	for i := range 12 {
		get(fmt.Sprint("k", i)).Close()
		time.Sleep(2 * time.Millisecond) // distinct use times
	}
	if _, err := os.Stat(filepath.Join(pinned.Dir, "data")); err != nil {
		t.Fatalf("the pinned entry was evicted: %v", err)
	}
	st := c.Stats()
	if st.Evictions < 8 || st.Entries > 4 {
		t.Errorf("stats %+v: want evictions down to 4 entries", st)
	}
	// The most recent keys stay, the oldest went.
	before := fills.Load()
	get("k11").Close()
	if fills.Load() != before {
		t.Error("the most recently used entry was evicted")
	}
	get("k0").Close()
	if fills.Load() != before+1 {
		t.Error("the least recently used entry was not evicted")
	}

	// With everything pinned nothing can be made room for.
	var hs []*objstore.Handle
	for i := range 3 {
		hs = append(hs, get(fmt.Sprint("p", i)))
	}
	if _, err := c.Get(ctx, "p3", mib+64*1024, fillBytes(mib, &fills)); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("get with every entry pinned: %v, want resource_exhausted", err)
	}
	if _, err := c.Get(ctx, "huge", 2*bound, fillBytes(mib, &fills)); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("get larger than the cache: %v, want resource_exhausted", err)
	}
	for _, h := range hs {
		h.Close()
	}
	pinned.Close()

	// Reopened (as after a crash, with a fill's temporary left behind),
	// the cache keeps its entries and removes the temporary.
	if err := os.MkdirAll(filepath.Join(dir, ".tmp-crashed", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	was := c.Stats()
	c2, err := objstore.OpenCache(dir, bound, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := c2.Stats(); st.Entries != was.Entries || st.Used != was.Used {
		t.Errorf("reopened: %+v, before: %+v", st, was)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-crashed")); !os.IsNotExist(err) {
		t.Errorf("a crashed fill's temporary survived the reopen: %v", err)
	}
	// Reopened with a smaller bound, it evicts down to it.
	c3, err := objstore.OpenCache(dir, 2*mib, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := c3.Stats(); st.Used > 2*mib || st.Entries != 1 {
		t.Errorf("reopened smaller: %+v", st)
	}
}

// TestCacheFillFailsAndCancels: a failed fill leaves no entry and is tried
// again by the next get; a fill whose every waiter gave up is cancelled.
func TestCacheFillFailsAndCancels(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	c, err := objstore.OpenCache(dir, 10*mib, nil)
	if err != nil {
		t.Fatal(err)
	}
	boom := fmt.Errorf("fetch: %w", errdefs.ErrUnavailable)
	if _, err := c.Get(ctx, "k", mib, func(context.Context, string) error { return boom }); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("failed fill: %v", err)
	}
	var fills atomic.Int32
	h, err := c.Get(ctx, "k", mib, fillBytes(1000, &fills))
	if err != nil || fills.Load() != 1 {
		t.Fatalf("get after a failed fill: %v (fills %d)", err, fills.Load())
	}
	h.Close()

	started, cancelled := make(chan struct{}), make(chan struct{})
	waiting, giveUp := context.WithCancel(ctx)
	go func() { <-started; giveUp() }()
	_, err = c.Get(waiting, "slow", mib, func(fctx context.Context, _ string) error {
		close(started)
		<-fctx.Done()
		close(cancelled)
		return fctx.Err()
	})
	if !errors.Is(err, errdefs.ErrCancelled) {
		t.Errorf("get given up: %v, want cancelled", err)
	}
	select {
	case <-cancelled:
	case <-time.After(time.Minute):
		t.Fatal("the fill was not cancelled when its only waiter left")
	}
	deadline := time.Now().Add(time.Minute)
	for {
		left, _ := filepath.Glob(filepath.Join(dir, ".tmp-*"))
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("temporaries left: %v", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
