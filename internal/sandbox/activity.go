package sandbox

import (
	"context"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// DefaultActivityFlush is how stale the store's last_activity_at may get
// before a touch writes it (Config.ActivityFlush): activity is kept in
// memory between writes, so busy sandboxes do not cost a write per
// request, and a restart loses at most this much of it. An attached event
// stream touches its sandbox this often, so that in a cluster the replica
// running idle expiry (the leader) sees a stream attached to another
// replica as activity at most this old.
const DefaultActivityFlush = 30 * time.Second

// idleRetry is how long idle expiry waits before it submits another suspend
// for a sandbox whose last one did not take it out of running or paused.
const idleRetry = time.Minute

// lifecycleState is the in-memory part of idle expiry: the newest activity
// of each sandbox, the event streams attached to it now (a sandbox with an
// attached stream is never idle), and the idle suspends submitted.
type lifecycleState struct {
	mu       sync.Mutex
	last     map[string]time.Time
	flushed  map[string]time.Time
	streams  map[string]int
	idleSubs map[string]time.Time
	// stops are closed when a sandbox leaves running, to end its streams.
	stops map[string]chan struct{}
}

func newLifecycleState() *lifecycleState {
	return &lifecycleState{last: map[string]time.Time{}, flushed: map[string]time.Time{},
		streams: map[string]int{}, idleSubs: map[string]time.Time{}, stops: map[string]chan struct{}{}}
}

// touch records command or stream activity on a sandbox.
func (s *Service) Touch(ctx context.Context, sandboxID string) {
	now := time.Now().UTC()
	l := s.life
	l.mu.Lock()
	l.last[sandboxID] = now
	flush := now.Sub(l.flushed[sandboxID]) >= s.cfg.ActivityFlush
	if flush {
		l.flushed[sandboxID] = now
	}
	l.mu.Unlock()
	if !flush {
		return
	}
	_, err := s.store.TransitionSandbox(context.WithoutCancel(ctx), store.AnyTenant, sandboxID, nil, "", func(sb *store.Sandbox) error {
		if sb.LastActivityAt.Before(now) {
			sb.LastActivityAt = now
		}
		return nil
	})
	if err != nil {
		s.logger.Warn("record sandbox activity", "sandbox", sandboxID, "err", err)
	}
}

// StreamAttached counts an event stream attached to a sandbox until the
// returned func is called.
func (s *Service) StreamAttached(ctx context.Context, sandboxID string) func() {
	s.Touch(ctx, sandboxID)
	l := s.life
	l.mu.Lock()
	l.streams[sandboxID]++
	l.mu.Unlock()
	stop := make(chan struct{})
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		tick := time.NewTicker(s.cfg.ActivityFlush)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				s.Touch(ctx, sandboxID)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-beat
			l.mu.Lock()
			if l.streams[sandboxID]--; l.streams[sandboxID] <= 0 {
				delete(l.streams, sandboxID)
			}
			l.mu.Unlock()
			s.Touch(ctx, sandboxID)
		})
	}
}

// idleSince returns when a sandbox was last active, and false while a
// stream is attached to it.
func (s *Service) idleSince(sb *store.Sandbox) (time.Time, bool) {
	l := s.life
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.streams[sb.ID] > 0 {
		return time.Time{}, false
	}
	last := sb.LastActivityAt
	if t := l.last[sb.ID]; t.After(last) {
		last = t
	}
	return last, true
}

// forget drops what the state keeps of a sandbox that is gone.
func (l *lifecycleState) forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.last, id)
	delete(l.flushed, id)
	delete(l.idleSubs, id)
}

// stopped returns a channel closed when the sandbox next leaves running.
func (l *lifecycleState) stopped(id string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.stops[id]
	if !ok {
		ch = make(chan struct{})
		l.stops[id] = ch
	}
	return ch
}

// leftRunning ends the event streams of a sandbox that stops running (they
// end without an exit event; clients reattach with after= once it runs).
func (l *lifecycleState) leftRunning(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ch, ok := l.stops[id]; ok {
		close(ch)
		delete(l.stops, id)
	}
}

// woke restarts a sandbox's idle period (after wake or restore).
func (l *lifecycleState) woke(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last[id] = time.Now().UTC()
	delete(l.idleSubs, id)
}

// expireIdle submits a suspend for a sandbox idle past its
// idle_timeout_seconds; it returns when the sandbox will be idle long
// enough, or the zero time.
func (s *Service) expireIdle(ctx context.Context, sb *store.Sandbox, now time.Time) time.Time {
	if sb.IdleTimeoutSeconds <= 0 || (sb.State != store.SandboxRunning && sb.State != store.SandboxPaused) {
		return time.Time{}
	}
	since, idle := s.idleSince(sb)
	if !idle {
		return now.Add(time.Duration(sb.IdleTimeoutSeconds) * time.Second)
	}
	due := since.Add(time.Duration(sb.IdleTimeoutSeconds) * time.Second)
	if due.After(now) {
		return due
	}
	l := s.life
	l.mu.Lock()
	if t, ok := l.idleSubs[sb.ID]; ok && now.Sub(t) < idleRetry {
		l.mu.Unlock()
		return t.Add(idleRetry)
	}
	l.idleSubs[sb.ID] = now
	l.mu.Unlock()
	op, err := s.SubmitOn(ctx, sb, store.OpSuspend, RuleOf(Suspend).From, nil)
	if err != nil {
		if errdefs.ClassOf(err) != errdefs.ErrConflict {
			s.logger.Error("idle suspend", "sandbox", sb.ID, "err", err)
		}
		return time.Time{}
	}
	s.logger.Info("sandbox idle: suspending", "sandbox", sb.ID, "op", op.ID, "idle_since", since)
	return time.Time{}
}

// Stopped returns a channel closed when the sandbox next leaves running:
// event streams end then.
func (s *Service) Stopped(sandboxID string) <-chan struct{} { return s.life.stopped(sandboxID) }
