package operation

import (
	"context"
	"sync"
)

// slots are the engine's handler slots (Config.Concurrency), of which one
// tenant's operations hold at most share at once. A tenant's operation
// waits for a place in its tenant's share first and only then for a slot,
// so however many operations one tenant floods the engine with, at most
// share of them hold or wait for slots: another tenant's next operation
// waits for a slot to come free, never behind the flood. Waits are in
// arrival order (Go's channel senders queue).
type slots struct {
	all   chan struct{}
	share int
	// waited is called when an operation waits for its tenant's share.
	waited func()

	mu      sync.Mutex
	tenants map[string]*tenantShare // only those holding or waiting
}

type tenantShare struct {
	held chan struct{}
	refs int // holders and waiters
}

func newSlots(total, share int, waited func()) *slots {
	return &slots{all: make(chan struct{}, total), share: share, waited: waited, tenants: map[string]*tenantShare{}}
}

// acquire waits for a slot for an operation of tenant; it returns the
// release, or false when ctx ended first.
func (s *slots) acquire(ctx context.Context, tenant string) (release func(), ok bool) {
	s.mu.Lock()
	ts := s.tenants[tenant]
	if ts == nil {
		ts = &tenantShare{held: make(chan struct{}, s.share)}
		s.tenants[tenant] = ts
	}
	ts.refs++
	s.mu.Unlock()
	select {
	case ts.held <- struct{}{}:
	default:
		s.waited()
		select {
		case ts.held <- struct{}{}:
		case <-ctx.Done():
			s.unref(tenant, ts)
			return nil, false
		}
	}
	select {
	case s.all <- struct{}{}:
	case <-ctx.Done():
		<-ts.held
		s.unref(tenant, ts)
		return nil, false
	}
	return func() {
		<-s.all
		<-ts.held
		s.unref(tenant, ts)
	}, true
}

func (s *slots) unref(tenant string, ts *tenantShare) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts.refs--; ts.refs == 0 {
		delete(s.tenants, tenant)
	}
}
