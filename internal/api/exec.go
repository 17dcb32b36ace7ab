package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/worker"
)

// capped keeps the first max bytes written to it and notes what it dropped.
type capped struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (c *capped) add(b []byte) {
	if room := c.max - c.buf.Len(); room < len(b) {
		b = b[:max(room, 0)]
		c.truncated = true
	}
	c.buf.Write(b)
}

// text returns the output as a string when it is UTF-8, else as bytes for
// the _b64 field.
func (c *capped) text() (string, []byte) {
	if utf8.Valid(c.buf.Bytes()) {
		return c.buf.String(), nil
	}
	return "", c.buf.Bytes()
}

// exec runs a short command to the end and answers its collected output.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.ExecRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if req.StdinData != "" {
		req.Stdin = true
	}
	if err := validateCommand(&req.CreateCommandRequest); err != nil {
		return err
	}
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	c, err := s.newCommand(ctx, sb, &req.CreateCommandRequest)
	if err != nil {
		return err
	}
	stdout := &capped{max: s.cfg.ExecOutputBytes}
	stderr := &capped{max: s.cfg.ExecOutputBytes}
	answer := func(ex apiv1.ExitStatus) {
		out := apiv1.ExecResponse{CommandID: c.ID, ExitCode: ex.ExitCode, Signal: ex.Signal, Reason: ex.Reason,
			StdoutTruncated: stdout.truncated, StderrTruncated: stderr.truncated}
		out.Stdout, out.StdoutB64 = stdout.text()
		out.Stderr, out.StderrB64 = stderr.text()
		writeJSON(w, http.StatusOK, out)
	}
	stctx, stcancel := sandbox.WithDeadline(ctx, c)
	started, ag, err := s.svc.EnsureStarted(stctx, sb, c)
	stcancel()
	if err != nil {
		if ctx.Err() == nil && sandbox.Overdue(c) {
			if ex, ended := s.svc.SettleOverdue(ctx, sb, c, 0); ended {
				answer(wireExit(ex))
				return nil
			}
		}
		return err
	}
	c = started
	if req.Stdin {
		data := []byte(req.StdinData)
		for len(data) > 0 {
			n := min(len(data), agentproto.MaxStdinChunk)
			if err := ag.Stdin(ctx, c.ProcessID, data[:n], false); err != nil {
				return err
			}
			data = data[n:]
		}
		if err := ag.Stdin(ctx, c.ProcessID, nil, true); err != nil {
			return err
		}
	}
	// The stream is bounded by the command's deadline (see
	// internal/sandbox/deadline.go); past it, the agent either says the exit is on
	// its way (read on, for one more call's time) or the server ends the
	// command.
	var lastSeq uint64
	bound := true
	for {
		var sctx context.Context
		var cancel context.CancelFunc
		if bound {
			sctx, cancel = sandbox.WithDeadline(ctx, c)
		} else {
			sctx, cancel = context.WithTimeout(ctx, sandbox.AgentCallTimeout)
		}
		ex, err := s.execEvents(sctx, ag, c.ProcessID, &lastSeq, stdout, stderr)
		cancel()
		stored, broken := s.svc.SettleBroken(ctx, sb, c, lastSeq, err)
		switch {
		case err == nil:
			s.svc.RecordExit(ctx, c.ID, ex.exit, ex.seq)
			answer(toExitStatus(ex.exit))
			return nil
		case broken:
			answer(wireExit(stored))
			return nil
		case bound && ctx.Err() == nil && sandbox.Overdue(c):
			if stored, ended := s.svc.SettleOverdue(ctx, sb, c, lastSeq); ended {
				answer(wireExit(stored))
				return nil
			}
			bound = false
		default:
			if errors.Is(err, io.EOF) {
				err = errdefs.New(errdefs.ErrUnavailable, "the command's output stream ended without an exit status").WithCause(err)
			}
			return err
		}
	}
}

type execExit struct {
	exit *agentproto.ExitStatus
	seq  uint64
}

// execEvents collects a process's output after *lastSeq until its exit.
func (s *Server) execEvents(ctx context.Context, ag worker.Guest, pid string, lastSeq *uint64, stdout, stderr *capped) (execExit, error) {
	stream, err := ag.Events(ctx, pid, *lastSeq)
	if err != nil {
		return execExit{}, err
	}
	defer stream.Close()
	for {
		ev, err := stream.Next()
		if err != nil {
			return execExit{}, err
		}
		*lastSeq = max(*lastSeq, ev.Seq)
		switch ev.Type {
		case agentproto.EventStdout:
			stdout.add(ev.Data)
		case agentproto.EventStderr:
			stderr.add(ev.Data)
		case agentproto.EventGap:
			stdout.truncated, stderr.truncated = true, true
		case agentproto.EventExit:
			if ev.Exit != nil {
				return execExit{exit: ev.Exit, seq: ev.Seq}, nil
			}
		}
	}
}
