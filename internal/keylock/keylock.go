// Package keylock serialises work per key (a command id, an idempotency
// key) inside one process. A key's entry lives only while someone holds or
// waits for it, so a long-running server does not keep one per key it ever
// saw. It knows nothing of what the keys name.
package keylock

import "sync"

// Map is a set of mutexes, one per key in use. The zero value is ready.
type Map struct {
	mu    sync.Mutex
	locks map[string]*entry
}

type entry struct {
	mu   sync.Mutex
	refs int // holders and waiters
}

// Lock waits for key and returns the function that releases it. The
// release must be called exactly once.
func (m *Map) Lock(key string) (unlock func()) {
	m.mu.Lock()
	if m.locks == nil {
		m.locks = map[string]*entry{}
	}
	e := m.locks[key]
	if e == nil {
		e = &entry{}
		m.locks[key] = e
	}
	e.refs++
	m.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		m.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(m.locks, key)
		}
		m.mu.Unlock()
	}
}

// Len is the number of keys held or waited for.
func (m *Map) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.locks)
}
