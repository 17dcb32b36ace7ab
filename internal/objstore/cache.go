package objstore

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Cache is a worker's local copy of downloaded objects: one directory per
// key, bounded in bytes (disk blocks, so holes cost nothing) with
// least-recently-used eviction. An entry is pinned while a Handle on it is
// open and is never evicted then. Concurrent Gets of one key share one
// fill. A fill writes into a temporary directory renamed into place when
// complete, so after a crash an entry is either whole or absent;
// temporaries left by a crash are removed by OpenCache.
type Cache struct {
	dir string
	max int64
	log *slog.Logger

	mu       sync.Mutex
	entries  map[string]*cacheEntry // by entry dir name
	lru      *list.List             // ready, unpinned-or-pinned entries; front = most recent
	used     int64                  // bytes of ready entries
	reserved int64                  // bytes promised to fills in progress
	stats    CacheStats
}

type cacheEntry struct {
	name string // dir name: "e-" + sha256(key)
	size int64
	refs int
	elem *list.Element // nil while loading

	// while loading:
	done    chan struct{}
	err     error
	waiters int
	cancel  context.CancelFunc
}

// CacheStats are counters for tests and metrics.
type CacheStats struct {
	Used, Max              int64
	Entries, Pinned        int
	Hits, Fills, Evictions int
}

const (
	cacheEntryPrefix = "e-"
	cacheTempPrefix  = ".tmp-"
)

// OpenCache opens (creating) the cache in dir, bounded to maxBytes. It
// removes temporaries a crash left and adopts the complete entries, oldest
// use first in line for eviction.
func OpenCache(dir string, maxBytes int64, log *slog.Logger) (*Cache, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("cache: %w: bound must be positive", errdefs.ErrInvalidArgument)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cache: %w: %v", errdefs.ErrInternal, err)
	}
	c := &Cache{dir: dir, max: maxBytes, log: log, entries: map[string]*cacheEntry{}, lru: list.New()}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cache: %w: %v", errdefs.ErrInternal, err)
	}
	type found struct {
		name string
		size int64
		used time.Time
	}
	var adopt []found
	for _, de := range des {
		path := filepath.Join(dir, de.Name())
		switch {
		case strings.HasPrefix(de.Name(), cacheTempPrefix):
			if err := os.RemoveAll(path); err != nil {
				return nil, fmt.Errorf("cache: remove leftover: %w: %v", errdefs.ErrInternal, err)
			}
		case strings.HasPrefix(de.Name(), cacheEntryPrefix) && de.IsDir():
			info, err := de.Info()
			if err != nil {
				return nil, fmt.Errorf("cache: %w: %v", errdefs.ErrInternal, err)
			}
			size, err := diskUsage(path)
			if err != nil {
				return nil, err
			}
			adopt = append(adopt, found{de.Name(), size, info.ModTime()})
		}
	}
	sort.Slice(adopt, func(i, j int) bool { return adopt[i].used.After(adopt[j].used) })
	for _, f := range adopt { // most recently used at the front
		e := &cacheEntry{name: f.name, size: f.size}
		c.entries[f.name] = e
		e.elem = c.lru.PushBack(e)
		c.used += f.size
	}
	c.mu.Lock()
	doomed := c.evictLocked(0)
	c.mu.Unlock()
	c.removeDirs(doomed)
	return c, nil
}

// Handle pins a ready cache entry until Close.
type Handle struct {
	// Dir holds the entry's files. Treat it as read-only: clone (reflink)
	// or copy what must change.
	Dir   string
	c     *Cache
	e     *cacheEntry
	close sync.Once
}

// Close unpins the entry (safe to call twice).
func (h *Handle) Close() {
	h.close.Do(func() {
		h.c.mu.Lock()
		h.e.refs--
		doomed := h.c.evictLocked(0)
		h.c.mu.Unlock()
		h.c.removeDirs(doomed)
	})
}

// FillFunc writes an entry's files into dir (a fresh empty directory).
type FillFunc func(ctx context.Context, dir string) error

// Get returns a pinned handle on the entry for key, filling it with fill
// when absent. size is what the entry will take (e.g. the manifest's
// DataBytes); room is made for it before the fill starts, and when it
// cannot be made because pinned entries hold the space, Get fails with
// ErrResourceExhausted. Concurrent Gets of one key share one fill, which
// runs until every caller waiting for it has given up.
func (c *Cache) Get(ctx context.Context, key string, size int64, fill FillFunc) (*Handle, error) {
	name := cacheEntryPrefix + hashKey(key)
	c.mu.Lock()
	e := c.entries[name]
	switch {
	case e != nil && e.elem != nil: // ready
		e.refs++
		c.lru.MoveToFront(e.elem)
		c.stats.Hits++
		c.mu.Unlock()
		now := time.Now()
		os.Chtimes(filepath.Join(c.dir, name), now, now) // the order survives a restart
		return c.handle(e), nil
	case e == nil:
		var doomed []string
		var err error
		e, doomed, err = c.startFillLocked(ctx, name, key, size, fill)
		if err != nil {
			c.mu.Unlock()
			c.removeDirs(doomed)
			return nil, err
		}
		e.waiters++
		c.mu.Unlock()
		c.removeDirs(doomed)
	default:
		e.waiters++
		c.mu.Unlock()
	}

	select {
	case <-e.done:
		if e.err != nil {
			return nil, e.err
		}
		return c.handle(e), nil // the fill pinned it for this waiter
	case <-ctx.Done():
		c.mu.Lock()
		select {
		case <-e.done:
			if e.err == nil { // pinned for us just now: unpin
				e.refs--
			}
		default:
			e.waiters--
			if e.waiters == 0 {
				e.cancel()
			}
		}
		doomed := c.evictLocked(0)
		c.mu.Unlock()
		c.removeDirs(doomed)
		return nil, fmt.Errorf("cache %s: %w", key, ctxClass(ctx))
	}
}

func (c *Cache) handle(e *cacheEntry) *Handle {
	return &Handle{Dir: filepath.Join(c.dir, e.name), c: c, e: e}
}

// startFillLocked reserves room and starts the one fill of an entry. It
// returns the dirs of the entries it evicted, to remove after unlocking.
func (c *Cache) startFillLocked(ctx context.Context, name, key string, size int64, fill FillFunc) (*cacheEntry, []string, error) {
	if size < 0 || size > c.max {
		return nil, nil, fmt.Errorf("cache %s: %w: %d bytes do not fit a cache of %d", key, errdefs.ErrResourceExhausted, size, c.max)
	}
	var evictable int64
	for el := c.lru.Front(); el != nil; el = el.Next() {
		if e := el.Value.(*cacheEntry); e.refs == 0 {
			evictable += e.size
		}
	}
	if c.used-evictable+c.reserved+size > c.max {
		return nil, nil, fmt.Errorf("cache %s: %w: %d bytes needed, %d of %d pinned or being filled",
			key, errdefs.ErrResourceExhausted, size, c.used-evictable+c.reserved, c.max)
	}
	doomed := c.evictLocked(size)
	// The fill outlives the caller who started it while others wait for it,
	// so it gets a context of its own, cancelled when the last waiter leaves.
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e := &cacheEntry{name: name, size: size, done: make(chan struct{}), cancel: cancel}
	c.entries[name] = e
	c.reserved += size
	c.stats.Fills++
	go c.runFill(fctx, e, key, fill)
	return e, doomed, nil
}

func (c *Cache) runFill(ctx context.Context, e *cacheEntry, key string, fill FillFunc) {
	defer e.cancel()
	final := filepath.Join(c.dir, e.name)
	size, err := c.fillDir(ctx, final, fill)
	c.mu.Lock()
	c.reserved -= e.size
	if err != nil {
		delete(c.entries, e.name)
		e.err = fmt.Errorf("cache %s: %w", key, err)
		close(e.done)
		c.mu.Unlock()
		return
	}
	e.size = size
	c.used += size
	e.refs = e.waiters // one pin for every caller still waiting
	e.elem = c.lru.PushFront(e)
	close(e.done)
	doomed := c.evictLocked(0)
	if c.used > c.max {
		c.log.Warn("cache over its bound: the pinned entries hold the space", "used", c.used, "max", c.max)
	}
	c.mu.Unlock()
	c.removeDirs(doomed)
}

// fillDir runs fill into a temporary dir, measures it and renames it into
// place.
func (c *Cache) fillDir(ctx context.Context, final string, fill FillFunc) (int64, error) {
	tmp, err := os.MkdirTemp(c.dir, cacheTempPrefix)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", errdefs.ErrInternal, err)
	}
	if err := fill(ctx, tmp); err != nil {
		os.RemoveAll(tmp)
		return 0, err
	}
	size, err := diskUsage(tmp)
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err == nil {
		err = syncDir(c.dir)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return 0, fmt.Errorf("%w: %v", errdefs.ErrInternal, err)
	}
	return size, nil
}

// evictLocked drops unpinned entries, least recently used first, until
// room more bytes fit under the bound (or nothing unpinned is left). It
// renames their dirs to temporaries and returns them for removal outside
// the lock (a crash in between leaves only temporaries).
func (c *Cache) evictLocked(room int64) []string {
	var doomed []string
	for el := c.lru.Back(); el != nil && c.used+c.reserved+room > c.max; {
		e := el.Value.(*cacheEntry)
		prev := el.Prev()
		if e.refs == 0 {
			c.lru.Remove(el)
			delete(c.entries, e.name)
			c.used -= e.size
			c.stats.Evictions++
			tmp := filepath.Join(c.dir, cacheTempPrefix+"evict-"+e.name)
			if err := os.Rename(filepath.Join(c.dir, e.name), tmp); err != nil {
				c.log.Warn("cache: could not evict", "entry", e.name, "err", err)
			} else {
				doomed = append(doomed, tmp)
			}
		}
		el = prev
	}
	return doomed
}

func (c *Cache) removeDirs(dirs []string) {
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			c.log.Warn("cache: could not remove an evicted entry", "dir", d, "err", err)
		}
	}
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Used, s.Max = c.used, c.max
	for _, e := range c.entries {
		if e.elem != nil {
			s.Entries++
			if e.refs > 0 {
				s.Pinned++
			}
		}
	}
	return s
}

func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16])
}

// diskUsage is the bytes of disk blocks the files under dir take.
func diskUsage(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("cache: measure %s: %w: %v", dir, errdefs.ErrInternal, err)
	}
	return n, nil
}

func ctxClass(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return errdefs.ErrDeadlineExceeded
	}
	return errdefs.ErrCancelled
}
