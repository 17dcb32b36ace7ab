package api

import (
	"net/http"
	"unicode/utf8"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/sandbox"
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

// commandEvents streams a command's events, starting it on the first
// attach (sandbox.Service.FollowCommand).
func (s *Server) commandEvents(w http.ResponseWriter, r *http.Request) error {
	after, err := afterParam(r)
	if err != nil {
		return err
	}
	sb, c, err := s.command(r)
	if err != nil {
		return err
	}
	return s.svc.FollowCommand(r.Context(), sb, c, after, s.cfg.Heartbeat, func() sandbox.EventSink {
		return eventSink{newEventWriter(w, r)}
	})
}

// eventSink writes a followed command's events on the wire.
type eventSink struct{ ew *eventWriter }

func (e eventSink) Event(ev agentproto.Event) error { return e.ew.event(toEvent(ev)) }
func (e eventSink) Exit(ex sandbox.Exit) error      { return e.ew.event(exitEvent(ex)) }
func (e eventSink) Heartbeat() error                { return e.ew.heartbeat() }

// Broken ends the stream with an error event.
func (e eventSink) Broken(cause error) {
	_, info := errorInfo(cause)
	if info.Code == "internal" {
		info.Message = "the event stream was interrupted; reattach with after= the last seq"
	}
	e.ew.event(apiv1.Event{Type: apiv1.EventError, Code: info.Code, Message: info.Message})
}

// exitEvent is a stored (numbered) exit as an event.
func exitEvent(ex sandbox.Exit) apiv1.Event {
	return apiv1.Event{Seq: ex.Seq, Type: apiv1.EventExit, Time: ex.EndedAt,
		ExitCode: ex.ExitCode, Signal: ex.Signal, Reason: ex.Reason}
}
