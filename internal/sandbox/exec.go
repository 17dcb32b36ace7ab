package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// Output is what a command wrote to one of its streams, up to a cap.
type Output struct {
	Data []byte
	// Truncated: the command wrote more than the cap, or the guest's
	// buffer dropped some of it.
	Truncated bool
}

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

func (c *capped) output() Output { return Output{Data: c.buf.Bytes(), Truncated: c.truncated} }

// ExecResult is how a command Exec ran ended, with its collected output.
type ExecResult struct {
	Command        *store.Command
	Exit           Exit
	Stdout, Stderr Output
}

// Exec runs spec in sb to its end: it stores the command session
// (NewCommand), starts it, writes stdin to it and closes it when
// spec.Stdin (stdin non-empty sets it), and collects at most outputCap
// bytes of each of stdout and stderr. The wait is bounded by the
// command's deadline (deadline.go); past it, the guest either says the
// exit is on its way (read on, for one more call's time) or the host ends
// the command.
func (s *Service) Exec(ctx context.Context, sb *store.Sandbox, spec agentproto.ProcessSpec, stdin []byte, outputCap int) (ExecResult, error) {
	if len(stdin) > 0 {
		spec.Stdin = true
	}
	c, err := s.NewCommand(ctx, sb, spec)
	if err != nil {
		return ExecResult{}, err
	}
	stdout, stderr := &capped{max: outputCap}, &capped{max: outputCap}
	result := func(ex Exit) (ExecResult, error) {
		return ExecResult{Command: c, Exit: ex, Stdout: stdout.output(), Stderr: stderr.output()}, nil
	}
	stctx, stcancel := WithDeadline(ctx, c)
	started, ag, err := s.EnsureStarted(stctx, sb, c)
	stcancel()
	if err != nil {
		if ctx.Err() == nil && Overdue(c) {
			if ex, ended := s.SettleOverdue(ctx, sb, c, 0); ended {
				return result(ex)
			}
		}
		return ExecResult{}, err
	}
	c = started
	if spec.Stdin {
		for data := stdin; len(data) > 0; {
			n := min(len(data), agentproto.MaxStdinChunk)
			if err := ag.Stdin(ctx, c.ProcessID, data[:n], false); err != nil {
				return ExecResult{}, err
			}
			data = data[n:]
		}
		if err := ag.Stdin(ctx, c.ProcessID, nil, true); err != nil {
			return ExecResult{}, err
		}
	}
	var lastSeq uint64
	bound := true
	for {
		var sctx context.Context
		var cancel context.CancelFunc
		if bound {
			sctx, cancel = WithDeadline(ctx, c)
		} else {
			sctx, cancel = context.WithTimeout(ctx, AgentCallTimeout)
		}
		ex, seq, err := execEvents(sctx, ag, c.ProcessID, &lastSeq, stdout, stderr)
		cancel()
		stored, broken := s.SettleBroken(ctx, sb, c, lastSeq, err)
		switch {
		case err == nil:
			s.RecordExit(ctx, c.ID, ex, seq)
			return result(ExitOf(ex, seq))
		case broken:
			return result(stored)
		case bound && ctx.Err() == nil && Overdue(c):
			if stored, ended := s.SettleOverdue(ctx, sb, c, lastSeq); ended {
				return result(stored)
			}
			bound = false
		default:
			if errors.Is(err, io.EOF) {
				err = errdefs.New(errdefs.ErrUnavailable, "the command's output stream ended without an exit status").WithCause(err)
			}
			return ExecResult{}, err
		}
	}
}

// execEvents collects a process's output after *lastSeq until its exit.
func execEvents(ctx context.Context, ag worker.Guest, pid string, lastSeq *uint64, stdout, stderr *capped) (*agentproto.ExitStatus, uint64, error) {
	stream, err := ag.Events(ctx, pid, *lastSeq)
	if err != nil {
		return nil, 0, err
	}
	defer stream.Close()
	for {
		ev, err := stream.Next()
		if err != nil {
			return nil, 0, err
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
				return ev.Exit, ev.Seq, nil
			}
		}
	}
}
