package agentclient

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// EventStream reads a process's events. When the link drops it redials and
// resumes after the last event it returned, so a reader sees every event
// once, in order (or a gap event where the agent's buffer lost some).
type EventStream struct {
	c    *Client
	ctx  context.Context
	id   string
	last uint64
	cl   *call
	done bool
	// moved is set once the current attach delivered an event.
	moved bool
	// breaks counts the attaches in a row that ended without delivering
	// an event; backoff is the wait before the next one.
	breaks  int
	backoff time.Duration
}

// How the stream reattaches after a break: after a wait that starts at
// reattachMin and doubles to reattachMax, and at most maxBreaks times in a
// row without an event in between. A guest whose agent answers each
// attach with a frame that does not decode, or ends each stream at once,
// gets its stream failed (errdefs.ErrDataLoss: the host decides how its
// command ended) instead of a reattach loop as fast as the link allows.
// A link that cannot be made at all is retried (with the same backoff)
// until ctx ends: that is a paused or restarting sandbox, not a lie; an
// attach the agent answered with a break counts as one.
const (
	reattachMin = 50 * time.Millisecond
	reattachMax = 2 * time.Second
	maxBreaks   = 8
)

// Events opens the event stream of process id, starting after sequence
// number after (0 = from the start). It fails at once if the process does
// not exist. ctx bounds the whole stream.
func (c *Client) Events(ctx context.Context, id string, after uint64) (agentproto.EventStream, error) {
	s := &EventStream{c: c, ctx: ctx, id: id, last: after}
	if _, err := s.attach(); err != nil {
		return nil, err
	}
	return s, nil
}

// attach opens the stream after the last event delivered; answered says
// the agent took the request (its answer, if err, was an error or a break).
func (s *EventStream) attach() (answered bool, err error) {
	cl, err := s.c.open(s.ctx, agentproto.OpEvents, agentproto.EventsRequest{ID: s.id, After: s.last, Raw: true})
	if err != nil {
		return false, err
	}
	if err := cl.response(agentproto.OpEvents, nil); err != nil {
		cl.Close()
		return true, err
	}
	s.cl = cl
	s.moved = false
	return true, nil
}

// LastSeq is the sequence number of the last event Next returned.
func (s *EventStream) LastSeq() uint64 { return s.last }

// Next returns the next event. After the exit event it returns io.EOF. Link
// failures are retried, with backoff, until ctx is done; agent errors (the
// process was forgotten) end the stream, and so do maxBreaks breaks in a
// row (errdefs.ErrDataLoss).
func (s *EventStream) Next() (agentproto.Event, error) {
	for {
		if s.done {
			return agentproto.Event{}, io.EOF
		}
		if s.cl == nil {
			if err := s.wait(); err != nil {
				return agentproto.Event{}, err
			}
			if answered, err := s.attach(); err != nil {
				if !retryable(err) || s.ctx.Err() != nil {
					return agentproto.Event{}, err
				}
				s.c.Disconnect()
				if answered {
					if err := s.broke(err); err != nil {
						return agentproto.Event{}, err
					}
				}
				continue
			}
		}
		var ev agentproto.Event
		err := agentproto.ReadEvent(s.cl.st, &ev)
		if err == nil {
			if ev.Seq <= s.last {
				continue // already delivered before a reconnect
			}
			s.last = ev.Seq
			s.moved = true
			s.breaks, s.backoff = 0, 0
			if ev.Type == agentproto.EventExit {
				s.done = true
				s.cl.Close()
			}
			return ev, nil
		}
		if err == io.EOF && !s.cl.sess.IsClosed() && !s.moved {
			// The agent ended the stream on a live link without an event:
			// nothing follows (after was already at or past the exit event).
			s.done = true
			s.cl.Close()
			return agentproto.Event{}, io.EOF
		}
		// Any other end before the exit event, an early end on a live link
		// included (the agent gave up writing, e.g. its link write timed
		// out), is a break: resume after the last event.
		s.cl.Close()
		s.cl = nil
		if s.ctx.Err() != nil {
			return agentproto.Event{}, linkError("events", s.ctx, err)
		}
		if !s.moved {
			if err := s.broke(err); err != nil {
				return agentproto.Event{}, err
			}
		}
	}
}

// broke counts an attach that ended (cause) without delivering an event,
// and fails the stream at the maxBreaks'th in a row.
func (s *EventStream) broke(cause error) error {
	if s.breaks++; s.breaks < maxBreaks {
		return nil
	}
	s.done = true
	return errdefs.New(errdefs.ErrDataLoss,
		"the sandbox's agent broke the command's event stream %d times in a row", s.breaks).WithCause(cause)
}

// wait sleeps before a reattach: nothing before the first, then from
// reattachMin doubling to reattachMax until an attach delivers an event.
func (s *EventStream) wait() error {
	d := s.backoff
	s.backoff = min(max(2*s.backoff, reattachMin), reattachMax)
	if d == 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.ctx.Done():
		return linkError("events", s.ctx, s.ctx.Err())
	case <-t.C:
		return nil
	}
}

func retryable(err error) bool {
	return errors.Is(err, errdefs.ErrUnavailable)
}

// Close stops the stream.
func (s *EventStream) Close() error {
	if s.cl != nil {
		s.cl.Close()
		s.cl = nil
	}
	s.done = true
	return nil
}
