package local

import (
	"slices"
	"sync"

	"github.com/space-sandbox/space/internal/template"
)

// templateLocks keep a template build's ready snapshots while they are
// made and read: creates, pool fills and PrepareTemplate hold the build's
// lock shared (through a boot and the template's ready command, when they
// make the snapshot), ForgetTemplate exclusively while it removes them.
// Each build (digest) has a lock of its own, so forgetting one template
// waits only for the work on that template's builds, and a create of any
// other template never waits behind a forget (a Go RWMutex with a writer
// waiting admits no new reader). Builds of equal content share a digest,
// and their snapshot: its lock covers them all.
type templateLocks struct {
	mu    sync.Mutex
	locks map[string]*templateLock // by digest, while held or waited for
}

type templateLock struct {
	rw    sync.RWMutex
	refs  int            // holders and waiters
	names map[string]int // template names the shared holders and waiters use
}

// get returns digest's lock with one more reference (for name, when set).
func (l *templateLocks) get(name, digest string) *templateLock {
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

func (l *templateLocks) put(name, digest string, tl *templateLock) {
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

// read holds build digest of template name shared until unlock is called
// (once).
func (l *templateLocks) read(name, digest string) (unlock func()) {
	tl := l.get(name, digest)
	tl.rw.RLock()
	return sync.OnceFunc(func() {
		tl.rw.RUnlock()
		l.put(name, digest, tl)
	})
}

// tryRead is read without the wait: false when digest is held or waited
// for exclusively.
func (l *templateLocks) tryRead(name, digest string) (unlock func(), ok bool) {
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

// write holds build digest exclusively until unlock is called (once).
func (l *templateLocks) write(digest string) (unlock func()) {
	tl := l.get("", digest)
	tl.rw.Lock()
	return sync.OnceFunc(func() {
		tl.rw.Unlock()
		l.put("", digest, tl)
	})
}

// digestsOf lists the builds that work under template name holds or waits
// for now.
func (l *templateLocks) digestsOf(name string) []string {
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

// lockPoolTarget holds the lock of the build whose snapshot t is (a
// snapshot that names no build was pruned at start), unless a forget of
// that build holds it or waits for it.
func (w *Worker) lockPoolTarget(t poolTarget) (unlock func(), ok bool) {
	name, digest, _ := template.ParseRef(t.m.Template)
	return w.tplLocks.tryRead(name, digest)
}
