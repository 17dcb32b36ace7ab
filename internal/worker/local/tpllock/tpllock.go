// Package tpllock is the local worker's locks on template builds: a
// build's ready snapshots are made and read under its lock held shared
// (creates, pool fills, PrepareTemplate) and removed under it held
// exclusively (ForgetTemplate). One lock per build digest, so that a
// forget waits only for its own template's work and no create of another
// template waits behind it. It knows nothing of files, VMs or pools.
package tpllock

import (
	"slices"
	"sync"
)

// Locks keep a template build's ready snapshots while they are
// made and read: creates, pool fills and PrepareTemplate hold the build's
// lock shared (through a boot and the template's ready command, when they
// make the snapshot), ForgetTemplate exclusively while it removes them.
// Each build (digest) has a lock of its own, so forgetting one template
// waits only for the work on that template's builds, and a create of any
// other template never waits behind a forget (a Go RWMutex with a writer
// waiting admits no new reader). Builds of equal content share a digest,
// and their snapshot: its lock covers them all.
type Locks struct {
	mu    sync.Mutex
	locks map[string]*templateLock // by digest, while held or waited for
}

type templateLock struct {
	rw    sync.RWMutex
	refs  int            // holders and waiters
	names map[string]int // template names the shared holders and waiters use
}

// get returns digest's lock with one more reference (for name, when set).
func (l *Locks) get(name, digest string) *templateLock {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.locks == nil {
		l.locks = map[string]*templateLock{}
	}
	tl := l.locks[digest]
	if tl == nil {
		tl = &templateLock{names: map[string]int{}}
		l.locks[digest] = tl
	}
	tl.refs++
	if name != "" {
		tl.names[name]++
	}
	return tl
}

func (l *Locks) put(name, digest string, tl *templateLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if name != "" {
		if tl.names[name]--; tl.names[name] == 0 {
			delete(tl.names, name)
		}
	}
	if tl.refs--; tl.refs == 0 {
		delete(l.locks, digest)
	}
}

// Read holds build digest of template name shared until unlock is called
// (once).
func (l *Locks) Read(name, digest string) (unlock func()) {
	tl := l.get(name, digest)
	tl.rw.RLock()
	return sync.OnceFunc(func() {
		tl.rw.RUnlock()
		l.put(name, digest, tl)
	})
}

// TryRead is Read without the wait: false when digest is held or waited
// for exclusively.
func (l *Locks) TryRead(name, digest string) (unlock func(), ok bool) {
	tl := l.get(name, digest)
	if !tl.rw.TryRLock() {
		l.put(name, digest, tl)
		return nil, false
	}
	return sync.OnceFunc(func() {
		tl.rw.RUnlock()
		l.put(name, digest, tl)
	}), true
}

// Write holds build digest exclusively until unlock is called (once).
func (l *Locks) Write(digest string) (unlock func()) {
	tl := l.get("", digest)
	tl.rw.Lock()
	return sync.OnceFunc(func() {
		tl.rw.Unlock()
		l.put("", digest, tl)
	})
}

// DigestsOf lists the builds that work under template name holds or waits
// for now.
func (l *Locks) DigestsOf(name string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for d, tl := range l.locks {
		if tl.names[name] > 0 {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}
