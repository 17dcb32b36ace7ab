package agent

import (
	"sort"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
)

// DefaultBufferBytes bounds a process's buffered output when its spec does
// not say.
const DefaultBufferBytes = 4 << 20

// evictedRing bounds how many evicted events the log remembers (sequence and
// running byte count) so it can say exactly how many bytes a resuming
// reader lost.
const evictedRing = 1 << 16

// eventLog is one process's bounded output log. Appending never blocks on
// readers: when the data exceeds the limit the oldest events are evicted and
// a reader that asks for them gets a synthesized gap event.
type eventLog struct {
	mu      sync.Mutex
	limit   int64
	events  []logEntry // retained, oldest first
	bytes   int64      // data bytes retained
	nextSeq uint64
	total   int64  // data bytes ever appended
	evicted []mark // most recent evictions, oldest first
	changed chan struct{}
	closed  bool // the exit event is in
}

type logEntry struct {
	ev     agentproto.Event
	before int64 // total data bytes appended before this event
}

type mark struct {
	seq   uint64
	after int64 // total data bytes up to and including seq
}

func newEventLog(limit int) *eventLog {
	if limit <= 0 {
		limit = DefaultBufferBytes
	}
	return &eventLog{limit: int64(limit), nextSeq: 1, changed: make(chan struct{})}
}

// append stores ev, assigning its sequence number and time, and wakes readers.
func (l *eventLog) append(ev agentproto.Event) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0
	}
	ev.Seq = l.nextSeq
	l.nextSeq++
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	l.events = append(l.events, logEntry{ev: ev, before: l.total})
	l.total += int64(len(ev.Data))
	l.bytes += int64(len(ev.Data))
	for l.bytes > l.limit && len(l.events) > 1 {
		e := l.events[0]
		l.events[0] = logEntry{}
		l.events = l.events[1:]
		l.bytes -= int64(len(e.ev.Data))
		l.evicted = append(l.evicted, mark{seq: e.ev.Seq, after: e.before + int64(len(e.ev.Data))})
		if len(l.evicted) > evictedRing {
			l.evicted = append(l.evicted[:0], l.evicted[len(l.evicted)-evictedRing/2:]...)
		}
	}
	if ev.Type == agentproto.EventExit {
		l.closed = true
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return ev.Seq
}

// lastSeq is the newest sequence number, 0 before any event.
func (l *eventLog) lastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nextSeq - 1
}

// since returns the events after seq (a gap event first when some of them
// were evicted), whether the log is complete (exit included in the returned
// events or already behind after), and a channel closed at the next append.
func (l *eventLog) since(after uint64) (evs []agentproto.Event, done bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	changed = l.changed
	if len(l.events) == 0 {
		return nil, l.closed, changed
	}
	first := l.events[0].ev.Seq
	if after+1 < first {
		evs = append(evs, agentproto.Event{
			Seq:       first - 1,
			Type:      agentproto.EventGap,
			Time:      l.events[0].ev.Time,
			LostBytes: l.events[0].before - l.bytesUpTo(after),
		})
	}
	start := 0
	if after >= first {
		start = int(after - first + 1)
	}
	for i := start; i < len(l.events); i++ {
		evs = append(evs, l.events[i].ev)
	}
	return evs, l.closed, changed
}

// bytesUpTo is the total data appended up to and including seq, for an
// evicted seq. When seq is older than the remembered evictions it answers
// with the oldest known mark, so the gap undercounts rather than overcounts.
func (l *eventLog) bytesUpTo(seq uint64) int64 {
	if seq == 0 {
		return 0
	}
	i := sort.Search(len(l.evicted), func(i int) bool { return l.evicted[i].seq >= seq })
	switch {
	case i < len(l.evicted) && l.evicted[i].seq == seq:
		return l.evicted[i].after
	case i > 0:
		return l.evicted[i-1].after
	case len(l.evicted) > 0:
		return l.evicted[0].after
	}
	return 0
}
