// Package readysnap is what one local worker process knows of its
// templates' ready snapshots: which it has verified (their manifests),
// which failed to be made and when, the template build each is of, and a
// lock per snapshot that serialises making it. It holds no files: the
// worker finds, makes, verifies and removes the snapshots, under the
// build's lock (tpllock), and tells the cache.
package readysnap

import (
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/worker/local/snapfile"
)

// Cache is the ready snapshots' state, by snapshot key. The zero value is
// ready to use.
type Cache struct {
	mu       sync.Mutex
	building map[string]*sync.Mutex
	verified map[string]snapfile.Manifest
	failed   map[string]time.Time
	refs     map[string]string // key -> the template build ("name@sha256:…")
}

func (c *Cache) init() {
	if c.building == nil {
		c.building, c.verified, c.failed = map[string]*sync.Mutex{}, map[string]snapfile.Manifest{}, map[string]time.Time{}
		c.refs = map[string]string{}
	}
}

// Lock serialises the work on snapshot key until unlock.
func (c *Cache) Lock(key string) (unlock func()) {
	c.mu.Lock()
	c.init()
	m := c.building[key]
	if m == nil {
		m = &sync.Mutex{}
		c.building[key] = m
	}
	c.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// Look records that key is a snapshot of build ref and says what is known
// of it: its manifest when verified, when its make last failed.
func (c *Cache) Look(key, ref string) (m snapfile.Manifest, verified bool, failedAt time.Time, failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	c.refs[key] = ref
	m, verified = c.verified[key]
	failedAt, failed = c.failed[key]
	return m, verified, failedAt, failed
}

// Ready records key as verified with manifest m.
func (c *Cache) Ready(key string, m snapfile.Manifest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	c.verified[key] = m
	delete(c.failed, key)
}

// Failed records that making key failed now.
func (c *Cache) Failed(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	c.failed[key] = time.Now()
}

// Drop forgets whether key was verified or failed (its files are going).
func (c *Cache) Drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.verified, key)
	delete(c.failed, key)
}

// Forget drops all that is known of the snapshots of the builds match
// picks.
func (c *Cache) Forget(match func(ref string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, ref := range c.refs {
		if match(ref) {
			delete(c.verified, key)
			delete(c.failed, key)
			delete(c.refs, key)
		}
	}
}

// Refs lists the builds of the snapshots known, once each.
func (c *Cache) Refs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, r := range c.refs {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}
