package sandbox

import (
	"context"
	"encoding/json"
	"io"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// What every edge does with a command session once it exists: list it
// fresh, write its stdin, signal it, resize its terminal.

// CommandPage is a page of sb's command sessions, each refreshed from the
// guest (Refresh), all within one RefreshBudget: a wedged guest must not
// hang a read.
func (s *Service) CommandPage(ctx context.Context, sb *store.Sandbox, pr store.PageRequest) (store.Page[*store.Command], error) {
	page, err := s.ListCommands(ctx, sb.TenantID, sb.ID, pr)
	if err != nil {
		return page, err
	}
	rctx, cancel := context.WithTimeout(ctx, RefreshBudget)
	defer cancel()
	for i, c := range page.Items {
		page.Items[i] = s.Refresh(rctx, sb, c)
	}
	return page, nil
}

// RunningCommand is c, which must be running in sb, which must be running,
// with its guest; a created c is started first when start is set. It is
// activity.
func (s *Service) RunningCommand(ctx context.Context, sb *store.Sandbox, c *store.Command, start bool) (*store.Command, worker.Guest, error) {
	if err := RequireState(sb, store.SandboxRunning); err != nil {
		return nil, nil, err
	}
	s.Touch(ctx, sb.ID)
	if c.State == store.CommandCreated && start {
		return s.EnsureStarted(ctx, sb, c)
	}
	if c.State != store.CommandRunning {
		return nil, nil, errdefs.New(errdefs.ErrConflict, "command %s is %s", c.ID, c.State).
			WithDetails(map[string]any{"state": string(c.State)})
	}
	ag, err := s.Agent(ctx, sb.ID)
	return c, Bounded(ag), err
}

// Stdin writes r to the stdin of command c of sb (starting it when it is
// created), in chunks the agent takes, and closes stdin after when eof.
// A command created without stdin (or a terminal) refuses. A read error
// of r is returned as it is: the edge knows what its body's errors mean.
func (s *Service) Stdin(ctx context.Context, sb *store.Sandbox, c *store.Command, r io.Reader, eof bool) error {
	c, ag, err := s.RunningCommand(ctx, sb, c, true)
	if err != nil {
		return err
	}
	var spec agentproto.ProcessSpec
	_ = json.Unmarshal(c.Spec, &spec)
	if !spec.Stdin && spec.PTY == nil {
		return errdefs.New(errdefs.ErrFailedPrecondition, "command %s was created without stdin", c.ID)
	}
	buf := make([]byte, agentproto.MaxStdinChunk)
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			if err := ag.Stdin(ctx, c.ProcessID, buf[:n], false); err != nil {
				return err
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return &ReadError{Err: rerr}
		}
	}
	if eof {
		return ag.Stdin(ctx, c.ProcessID, nil, true)
	}
	return nil
}

// ReadError is a failure to read what a caller sent (Stdin's reader).
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return "read: " + e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }

// Signal sends signal (a name such as "SIGTERM" or a number) to running
// command c of sb.
func (s *Service) Signal(ctx context.Context, sb *store.Sandbox, c *store.Command, signal string) error {
	if err := ValidSignal(signal); err != nil {
		return err
	}
	c, ag, err := s.RunningCommand(ctx, sb, c, false)
	if err != nil {
		return err
	}
	return ag.Signal(ctx, c.ProcessID, signal)
}

// Resize sets the terminal size of running command c of sb.
func (s *Service) Resize(ctx context.Context, sb *store.Sandbox, c *store.Command, rows, cols int) error {
	if err := ValidResize(rows, cols); err != nil {
		return err
	}
	c, ag, err := s.RunningCommand(ctx, sb, c, false)
	if err != nil {
		return err
	}
	return ag.Resize(ctx, c.ProcessID, uint16(rows), uint16(cols))
}
