package sandbox

import (
	"context"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// DefaultActivityFlush is the longest the store's last_activity_at lags
// behind a sandbox's activity (Config.ActivityFlush): activity is kept in
// memory and written at most once per flush interval per sandbox, so busy
// sandboxes do not cost a write per request, and activity that came
// between two writes is written when the interval ends (a trailing
// write). A sandbox with an idle_timeout flushes every quarter of it
// (never more often than minActivityFlush), so the replica running idle
// expiry (a cluster's leader) reads, well before the timeout passes, the
// activity another replica saw; an attached event stream touches its
// sandbox at that interval too.
const DefaultActivityFlush = 30 * time.Second

// minActivityFlush bounds how often one sandbox's activity is written.
const minActivityFlush = 250 * time.Millisecond

// activityFlushFor is the flush interval of a sandbox with idle timeout
// idleSeconds (none: most).
func activityFlushFor(idleSeconds int, most time.Duration) time.Duration {
	if idleSeconds <= 0 {
		return most
	}
	return min(max(time.Duration(idleSeconds)*time.Second/4, minActivityFlush), most)
}

// idleRetry is how long idle expiry waits before it submits another suspend
// for a sandbox whose last one did not take it out of running or paused.
const idleRetry = time.Minute

// activityWriteTimeout bounds a trailing activity write.
const activityWriteTimeout = 10 * time.Second

// lifecycleState is the in-memory part of idle expiry: the newest activity
// of each sandbox, when it was last written and at what interval it is,
// the event streams attached to it now (a sandbox with an attached stream
// is never idle), and the idle suspends submitted.
type lifecycleState struct {
	mu       sync.Mutex
	last     map[string]time.Time
	flushed  map[string]time.Time
	every    map[string]time.Duration
	trail    map[string]*time.Timer
	streams  map[string]int
	idleSubs map[string]time.Time
	// stops are closed when a sandbox leaves running, to end its streams.
	stops map[string]chan struct{}
}

func newLifecycleState() *lifecycleState {
	return &lifecycleState{last: map[string]time.Time{}, flushed: map[string]time.Time{},
		every: map[string]time.Duration{}, trail: map[string]*time.Timer{},
		streams: map[string]int{}, idleSubs: map[string]time.Time{}, stops: map[string]chan struct{}{}}
}

// flushEvery is the activity flush interval of a sandbox, from its idle
// timeout (read from the store once per sandbox and kept).
func (s *Service) flushEvery(ctx context.Context, sandboxID string) time.Duration {
	l := s.life
	l.mu.Lock()
	d, ok := l.every[sandboxID]
	l.mu.Unlock()
	if ok {
		return d
	}
	sb, err := s.store.GetSandbox(context.WithoutCancel(ctx), store.AnyTenant, sandboxID)
	if err != nil {
		return s.cfg.ActivityFlush // unknown now: not kept
	}
	d = activityFlushFor(sb.IdleTimeoutSeconds, s.cfg.ActivityFlush)
	l.mu.Lock()
	l.every[sandboxID] = d
	l.mu.Unlock()
	return d
}

// Touch records command or stream activity on a sandbox: in memory now,
// in the store at most once per flush interval (the activity of the
// interval that ends unwritten is written when it ends).
func (s *Service) Touch(ctx context.Context, sandboxID string) {
	every := s.flushEvery(ctx, sandboxID)
	now := time.Now().UTC()
	l := s.life
	l.mu.Lock()
	l.last[sandboxID] = now
	since := now.Sub(l.flushed[sandboxID])
	flush := since >= every
	if flush {
		l.flushed[sandboxID] = now
	} else if l.trail[sandboxID] == nil {
		l.trail[sandboxID] = time.AfterFunc(every-since, func() { s.flushTrailing(sandboxID) })
	}
	l.mu.Unlock()
	if flush {
		s.writeActivity(context.WithoutCancel(ctx), sandboxID, now)
	}
}

// flushTrailing writes the activity that came after a sandbox's last write.
func (s *Service) flushTrailing(sandboxID string) {
	l := s.life
	l.mu.Lock()
	delete(l.trail, sandboxID)
	last, ok := l.last[sandboxID]
	if !ok || !last.After(l.flushed[sandboxID]) {
		l.mu.Unlock()
		return
	}
	l.flushed[sandboxID] = time.Now().UTC()
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), activityWriteTimeout)
	defer cancel()
	s.writeActivity(ctx, sandboxID, last)
}

// writeActivity moves the store's last_activity_at of a sandbox forward to at.
func (s *Service) writeActivity(ctx context.Context, sandboxID string, at time.Time) {
	_, err := s.store.TransitionSandbox(ctx, store.AnyTenant, sandboxID, nil, "", func(sb *store.Sandbox) error {
		if sb.LastActivityAt.Before(at) {
			sb.LastActivityAt = at
		}
		return nil
	})
	if err != nil {
		s.logger.Warn("record sandbox activity", "sandbox", sandboxID, "err", err)
	}
}

// StreamAttached counts an event stream attached to a sandbox until the
// returned func is called; meanwhile it touches the sandbox every flush
// interval, so replicas that do not see the stream see it as activity.
func (s *Service) StreamAttached(ctx context.Context, sandboxID string) func() {
	s.Touch(ctx, sandboxID)
	l := s.life
	l.mu.Lock()
	l.streams[sandboxID]++
	l.mu.Unlock()
	stop := make(chan struct{})
	beat := make(chan struct{})
	every := s.flushEvery(ctx, sandboxID)
	go func() {
		defer close(beat)
		tick := time.NewTicker(every)
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
	delete(l.every, id)
	if t := l.trail[id]; t != nil {
		t.Stop()
		delete(l.trail, id)
	}
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
