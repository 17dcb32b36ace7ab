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
}

// Events opens the event stream of process id, starting after sequence
// number after (0 = from the start). It fails at once if the process does
// not exist. ctx bounds the whole stream.
func (c *Client) Events(ctx context.Context, id string, after uint64) (agentproto.EventStream, error) {
	s := &EventStream{c: c, ctx: ctx, id: id, last: after}
	if err := s.attach(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *EventStream) attach() error {
	cl, err := s.c.open(s.ctx, agentproto.OpEvents, agentproto.EventsRequest{ID: s.id, After: s.last, Raw: true})
	if err != nil {
		return err
	}
	if err := cl.response(agentproto.OpEvents, nil); err != nil {
		cl.Close()
		return err
	}
	s.cl = cl
	s.moved = false
	return nil
}

// LastSeq is the sequence number of the last event Next returned.
func (s *EventStream) LastSeq() uint64 { return s.last }

// Next returns the next event. After the exit event it returns io.EOF. Link
// failures are retried until ctx is done; agent errors (the process was
// forgotten) end the stream.
func (s *EventStream) Next() (agentproto.Event, error) {
	for {
		if s.done {
			return agentproto.Event{}, io.EOF
		}
		if s.cl == nil {
			if err := s.attach(); err != nil {
				if !retryable(err) || s.ctx.Err() != nil {
					return agentproto.Event{}, err
				}
				s.c.Disconnect()
				select {
				case <-s.ctx.Done():
					return agentproto.Event{}, linkError("events", s.ctx, s.ctx.Err())
				case <-time.After(100 * time.Millisecond):
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
