package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
)

// toEvent converts an agent event into the API's.
func toEvent(e agentproto.Event) apiv1.Event {
	out := apiv1.Event{Seq: e.Seq, Type: e.Type}
	if !e.Time.IsZero() {
		t := e.Time.UTC()
		out.Time = &t
	}
	switch e.Type {
	case agentproto.EventStarted:
		out.PID = e.PID
	case agentproto.EventStdout, agentproto.EventStderr:
		if utf8.Valid(e.Data) {
			s := string(e.Data)
			out.Data = &s
		} else {
			out.DataB64 = e.Data
		}
	case agentproto.EventGap:
		out.LostBytes = e.LostBytes
	case agentproto.EventExit:
		if e.Exit != nil {
			ex := toExitStatus(e.Exit)
			out.ExitCode, out.Signal, out.Reason = ex.ExitCode, ex.Signal, ex.Reason
		}
	}
	return out
}

type nextResult struct {
	ev  agentproto.Event
	err error
}

// commandEvents streams a command's events, starting it on the first attach.
func (s *Server) commandEvents(w http.ResponseWriter, r *http.Request) error {
	after, err := afterParam(r)
	if err != nil {
		return err
	}
	sb, c, err := s.command(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	if c.State == store.CommandExited && sb.State != store.SandboxRunning {
		// The guest is gone; what the store kept is all there is.
		ew := newEventWriter(w, r)
		if ex, ok := sandbox.DecodeExit(c); ok && (ex.Seq == 0 || ex.Seq > after) {
			ew.event(exitEvent(ex, after))
		}
		return nil
	}
	if err := sandbox.RequireState(sb, store.SandboxRunning); err != nil {
		return err
	}
	c, ag, err := s.svc.EnsureStarted(ctx, sb, c)
	if err != nil {
		return err
	}
	defer s.svc.StreamAttached(ctx, sb.ID)()
	// The reader goroutine owns the stream: cancelling sctx interrupts it,
	// and it closes the stream itself, so Next and Close never race.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := sandbox.OpenEvents(sctx, cancel, ag, c, after)
	if err != nil {
		if ctx.Err() == nil && sandbox.Overdue(c) {
			if ex, ended := s.svc.SettleOverdue(ctx, sb, c, after); ended {
				newEventWriter(w, r).event(exitEvent(ex, after))
				return nil
			}
		}
		return err
	}
	ew := newEventWriter(w, r)
	next := make(chan nextResult)
	go func() {
		defer stream.Close()
		for {
			ev, err := stream.Next()
			select {
			case next <- nextResult{ev, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	idle := time.NewTimer(s.cfg.Heartbeat)
	defer idle.Stop()
	stop := s.svc.Stopped(sb.ID)
	deadline, stopDeadline := sandbox.DeadlineTimer(c) // see internal/sandbox/deadline.go
	defer stopDeadline()
	lastSeq := after
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-deadline:
			if ex, ended := s.svc.SettleOverdue(ctx, sb, c, lastSeq); ended {
				ew.event(exitEvent(ex, lastSeq))
				return nil
			}
			deadline = time.After(sandbox.DeadlineGrace) // the exit is on its way
		case <-stop:
			s.endStream(r, ew, sb, c.ID, errdefs.New(errdefs.ErrUnavailable,
				"the sandbox stopped running (pause, suspend or restore); reattach with after= once it runs"))
			return nil
		case <-idle.C:
			// A stream whose sandbox went away would otherwise wait for the
			// link forever.
			if cur, err := s.svc.GetSandbox(ctx, sb.TenantID, sb.ID); err == nil && cur.State != store.SandboxRunning {
				// A delete records every command's exit before it stops
				// the VM: until then the stream waits for that exit
				// rather than ending with an error.
				if cur.State != store.SandboxDeleting || s.storedExit(ctx, sb, c.ID) {
					s.endStream(r, ew, sb, c.ID, errdefs.New(errdefs.ErrUnavailable, "sandbox is %s", cur.State))
					return nil
				}
			}
			if ew.heartbeat() != nil {
				return nil
			}
			idle.Reset(s.cfg.Heartbeat)
		case n := <-next:
			if n.err != nil {
				if ex, ended := s.svc.SettleBroken(ctx, sb, c, lastSeq, n.err); ended {
					ew.event(exitEvent(ex, lastSeq))
					return nil
				}
				if ctx.Err() == nil && sandbox.Overdue(c) {
					if ex, ended := s.svc.SettleOverdue(ctx, sb, c, lastSeq); ended {
						ew.event(exitEvent(ex, lastSeq))
						return nil
					}
				}
				s.endStream(r, ew, sb, c.ID, n.err)
				return nil
			}
			if n.ev.Type == agentproto.EventExit && n.ev.Exit != nil {
				s.svc.RecordExit(ctx, c.ID, n.ev.Exit, n.ev.Seq)
			}
			if ew.event(toEvent(n.ev)) != nil {
				return nil
			}
			lastSeq = max(lastSeq, n.ev.Seq)
			if n.ev.Type == agentproto.EventExit {
				return nil
			}
			idle.Reset(s.cfg.Heartbeat)
		}
	}
}

// endStream ends a stream the agent side closed before an exit event: when
// the sandbox meanwhile went away the stored exit is sent, otherwise an
// error event (a closed stream alone never says how a command ended).
func (s *Server) endStream(r *http.Request, ew *eventWriter, sb *store.Sandbox, cid string, cause error) {
	ctx := r.Context()
	if c, err := s.svc.GetCommand(ctx, sb.TenantID, sb.ID, cid); err == nil {
		if ex, ok := sandbox.DecodeExit(c); ok {
			ew.event(exitEvent(ex, 0))
			return
		}
	}
	if errors.Is(cause, io.EOF) {
		cause = errors.New("event stream ended without an exit event")
	}
	s.log(r).Warn("command event stream broke", "command", cid, "err", sandbox.CauseString(cause))
	_, info := errorInfo(cause)
	if info.Code == "internal" {
		info.Message = "the event stream was interrupted; reattach with after= the last seq"
	}
	ew.event(apiv1.Event{Type: apiv1.EventError, Code: info.Code, Message: info.Message})
}

// storedExit tells whether the store holds the command's exit.
func (s *Server) storedExit(ctx context.Context, sb *store.Sandbox, cid string) bool {
	c, err := s.svc.GetCommand(ctx, sb.TenantID, sb.ID, cid)
	if err != nil {
		return false
	}
	_, ok := sandbox.DecodeExit(c)
	return ok
}

func exitEvent(ex sandbox.Exit, after uint64) apiv1.Event {
	seq := ex.Seq
	if seq == 0 {
		seq = after + 1
	}
	return apiv1.Event{Seq: seq, Type: apiv1.EventExit, Time: ex.EndedAt,
		ExitCode: ex.ExitCode, Signal: ex.Signal, Reason: ex.Reason}
}
