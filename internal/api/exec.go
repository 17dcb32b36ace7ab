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
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req apiv1.ExecRequest
	if err := decodeJSON(r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.StdinData != "" {
		req.Stdin = true
	}
	if err := validateCommand(&req.CreateCommandRequest); err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, err := s.sandbox(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx := r.Context()
	c, err := s.newCommand(ctx, sb, &req.CreateCommandRequest)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	c, ag, err := s.ensureStarted(ctx, sb, c)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Stdin {
		data := []byte(req.StdinData)
		for len(data) > 0 {
			n := min(len(data), agentproto.MaxStdinChunk)
			if err := ag.Stdin(ctx, c.ProcessID, data[:n], false); err != nil {
				s.writeError(w, r, err)
				return
			}
			data = data[n:]
		}
		if err := ag.Stdin(ctx, c.ProcessID, nil, true); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := ag.Events(sctx, c.ProcessID, 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer stream.Close()
	stdout := &capped{max: s.cfg.ExecOutputBytes}
	stderr := &capped{max: s.cfg.ExecOutputBytes}
	for {
		ev, err := stream.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errdefs.New(errdefs.ErrUnavailable, "the command's output stream ended without an exit status").WithCause(err)
			}
			s.writeError(w, r, err)
			return
		}
		switch ev.Type {
		case agentproto.EventStdout:
			stdout.add(ev.Data)
		case agentproto.EventStderr:
			stderr.add(ev.Data)
		case agentproto.EventGap:
			stdout.truncated, stderr.truncated = true, true
		case agentproto.EventExit:
			if ev.Exit == nil {
				continue
			}
			s.recordExit(ctx, c.ID, ev.Exit, ev.Seq)
			ex := toExitStatus(ev.Exit)
			out := apiv1.ExecResponse{CommandID: c.ID, ExitCode: ex.ExitCode, Signal: ex.Signal, Reason: ex.Reason,
				StdoutTruncated: stdout.truncated, StderrTruncated: stderr.truncated}
			out.Stdout, out.StdoutB64 = stdout.text()
			out.Stderr, out.StderrB64 = stderr.text()
			writeJSON(w, http.StatusOK, out)
			return
		}
	}
}
