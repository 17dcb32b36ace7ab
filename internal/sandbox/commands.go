package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// EnsureStarted starts a created command in the guest, once.
func (s *Service) EnsureStarted(ctx context.Context, sb *store.Sandbox, c *store.Command) (*store.Command, worker.Guest, error) {
	ag, err := s.Agent(ctx, sb.ID)
	if err != nil {
		return nil, nil, err
	}
	ag = Bounded(ag) // deadline.go
	if c.State != store.CommandCreated {
		return c, ag, nil
	}
	defer s.cmdLocks.Lock(c.ID)()
	c, err = s.store.GetCommand(ctx, sb.TenantID, sb.ID, c.ID)
	if err != nil || c.State != store.CommandCreated {
		return c, ag, err
	}
	var spec agentproto.ProcessSpec
	if err := json.Unmarshal(c.Spec, &spec); err != nil {
		return nil, nil, fmt.Errorf("decode command spec: %w", errdefs.ErrInternal)
	}
	spec.ID = c.ProcessID
	info, err := ag.Start(ctx, spec)
	if errdefs.ClassOf(err) == errdefs.ErrConflict {
		// Started already (by another control-plane process); adopt it.
		info, err = ag.Get(ctx, c.ProcessID)
	}
	if err != nil {
		return nil, nil, err
	}
	started := info.StartedAt.UTC()
	if started.IsZero() {
		started = time.Now().UTC()
	}
	c, err = s.store.UpdateCommand(context.WithoutCancel(ctx), c.ID, []store.CommandState{store.CommandCreated}, func(c *store.Command) error {
		c.State, c.PID, c.StartedAt = store.CommandRunning, info.PID, &started
		return nil
	})
	return c, ag, err
}

// RecordExit stores how a command ended (first writer wins).
func (s *Service) RecordExit(ctx context.Context, id string, ex *agentproto.ExitStatus, seq uint64) {
	raw, _ := json.Marshal(ExitOf(ex, seq))
	_, err := s.store.UpdateCommand(context.WithoutCancel(ctx), id,
		[]store.CommandState{store.CommandCreated, store.CommandRunning}, func(c *store.Command) error {
			c.State, c.Exit = store.CommandExited, raw
			return nil
		})
	if err != nil && errdefs.ClassOf(err) != errdefs.ErrConflict {
		s.logger.Warn("record command exit", "command", id, "err", err)
	}
}

// refresh asks the agent about a running command and records its exit.
func (s *Service) Refresh(ctx context.Context, sb *store.Sandbox, c *store.Command) *store.Command {
	if c.State != store.CommandRunning || sb.State != store.SandboxRunning {
		return c
	}
	ag, err := s.Agent(ctx, sb.ID)
	if err != nil {
		return c
	}
	info, err := ag.Get(ctx, c.ProcessID)
	if err != nil || info.Exit == nil {
		return s.EndIfOverdue(ctx, sb, c)
	}
	s.RecordExit(ctx, c.ID, info.Exit, info.LastSeq)
	if fresh, err := s.store.GetCommand(ctx, sb.TenantID, sb.ID, c.ID); err == nil {
		return fresh
	}
	return c
}
