package sandbox

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// EventSink is what an edge makes of a followed command's events. A method
// that returns an error (the client left) ends the stream.
type EventSink interface {
	// Event is an event from the guest, as it came; an exit event's exit
	// is recorded already.
	Event(ev agentproto.Event) error
	// Exit is the exit the store holds or the host decided (the guest's
	// stream can no longer say it); its Seq numbers it.
	Exit(ex Exit) error
	// Heartbeat says the stream is alive while nothing happens.
	Heartbeat() error
	// Broken ends a stream that stopped before an exit: err's class and
	// public message say why (an internal one says nothing: the edge
	// words it).
	Broken(err error)
}

// FollowCommand streams command c of sb after event seq after into the
// sink that open makes, starting c on the first attach. An error before
// open is called is the request's (the sandbox does not run, the guest
// cannot be reached); after it, everything goes to the sink and
// FollowCommand returns nil. A sink heartbeats after heartbeat of silence.
// A stopped sandbox (pause, suspend, restore, delete) ends the stream:
// with the stored exit when there is one.
func (s *Service) FollowCommand(ctx context.Context, sb *store.Sandbox, c *store.Command, after uint64, heartbeat time.Duration, open func() EventSink) error {
	if c.State == store.CommandExited && sb.State != store.SandboxRunning {
		// The guest is gone; what the store kept is all there is.
		sink := open()
		if ex, ok := DecodeExit(c); ok && (ex.Seq == 0 || ex.Seq > after) {
			_ = sink.Exit(numbered(ex, after))
		}
		return nil
	}
	if err := RequireState(sb, store.SandboxRunning); err != nil {
		return err
	}
	c, ag, err := s.EnsureStarted(ctx, sb, c)
	if err != nil {
		return err
	}
	defer s.StreamAttached(ctx, sb.ID)()
	// The reader goroutine owns the stream: cancelling sctx interrupts it,
	// and it closes the stream itself, so Next and Close never race.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := OpenEvents(sctx, cancel, ag, c, after)
	if err != nil {
		if ctx.Err() == nil && Overdue(c) {
			if ex, ended := s.SettleOverdue(ctx, sb, c, after); ended {
				_ = open().Exit(numbered(ex, after))
				return nil
			}
		}
		return err
	}
	sink := open()
	type next struct {
		ev  agentproto.Event
		err error
	}
	nexts := make(chan next)
	go func() {
		defer stream.Close()
		for {
			ev, err := stream.Next()
			select {
			case nexts <- next{ev, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	idle := time.NewTimer(heartbeat)
	defer idle.Stop()
	stop := s.Stopped(sb.ID)
	deadline, stopDeadline := DeadlineTimer(c) // deadline.go
	defer stopDeadline()
	lastSeq := after
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-deadline:
			if ex, ended := s.SettleOverdue(ctx, sb, c, lastSeq); ended {
				_ = sink.Exit(numbered(ex, lastSeq))
				return nil
			}
			deadline = time.After(DeadlineGrace) // the exit is on its way
		case <-stop:
			s.endFollow(ctx, sink, sb, c.ID, errdefs.New(errdefs.ErrUnavailable,
				"the sandbox stopped running (pause, suspend or restore); reattach with after= once it runs"))
			return nil
		case <-idle.C:
			// A stream whose sandbox went away would otherwise wait for the
			// link forever.
			if cur, err := s.GetSandbox(ctx, sb.TenantID, sb.ID); err == nil && cur.State != store.SandboxRunning {
				// A delete records every command's exit before it stops
				// the VM: until then the stream waits for that exit
				// rather than ending with an error.
				if cur.State != store.SandboxDeleting || s.storedExit(ctx, sb, c.ID) {
					s.endFollow(ctx, sink, sb, c.ID, errdefs.New(errdefs.ErrUnavailable, "sandbox is %s", cur.State))
					return nil
				}
			}
			if sink.Heartbeat() != nil {
				return nil
			}
			idle.Reset(heartbeat)
		case n := <-nexts:
			if n.err != nil {
				if ex, ended := s.SettleBroken(ctx, sb, c, lastSeq, n.err); ended {
					_ = sink.Exit(numbered(ex, lastSeq))
					return nil
				}
				if ctx.Err() == nil && Overdue(c) {
					if ex, ended := s.SettleOverdue(ctx, sb, c, lastSeq); ended {
						_ = sink.Exit(numbered(ex, lastSeq))
						return nil
					}
				}
				s.endFollow(ctx, sink, sb, c.ID, n.err)
				return nil
			}
			if n.ev.Type == agentproto.EventExit && n.ev.Exit != nil {
				s.RecordExit(ctx, c.ID, n.ev.Exit, n.ev.Seq)
			}
			if sink.Event(n.ev) != nil {
				return nil
			}
			lastSeq = max(lastSeq, n.ev.Seq)
			if n.ev.Type == agentproto.EventExit {
				return nil
			}
			idle.Reset(heartbeat)
		}
	}
}

// endFollow ends a stream the agent side closed before an exit event: when
// the sandbox meanwhile went away the stored exit is sent, otherwise the
// cause (a closed stream alone never says how a command ended).
func (s *Service) endFollow(ctx context.Context, sink EventSink, sb *store.Sandbox, cid string, cause error) {
	if c, err := s.GetCommand(ctx, sb.TenantID, sb.ID, cid); err == nil {
		if ex, ok := DecodeExit(c); ok {
			_ = sink.Exit(numbered(ex, 0))
			return
		}
	}
	if errors.Is(cause, io.EOF) {
		cause = errors.New("event stream ended without an exit event")
	}
	s.logger.Warn("command event stream broke", "request_id", s.requestID(ctx), "command", cid, "err", CauseString(cause))
	sink.Broken(cause)
}

// storedExit tells whether the store holds the command's exit.
func (s *Service) storedExit(ctx context.Context, sb *store.Sandbox, cid string) bool {
	c, err := s.GetCommand(ctx, sb.TenantID, sb.ID, cid)
	if err != nil {
		return false
	}
	_, ok := DecodeExit(c)
	return ok
}

// numbered is ex with a sequence number: its own, else the one after
// after.
func numbered(ex Exit, after uint64) Exit {
	if ex.Seq == 0 {
		ex.Seq = after + 1
	}
	return ex
}
