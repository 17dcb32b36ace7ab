package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
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

// RecordExit stores how a command ended, as its guest reported it (first
// writer wins); an exit the guest may not report is recorded "lost".
func (s *Service) RecordExit(ctx context.Context, id string, ex *agentproto.ExitStatus, seq uint64) {
	if err := checkGuestExit(ex); err != nil {
		s.logger.Warn("guest reported an exit it may not: recorded as lost", "command", id, "err", err)
	}
	s.recordExit(ctx, id, ExitOf(ex, seq))
}

// recordExit stores an exit the host decided (first writer wins).
func (s *Service) recordExit(ctx context.Context, id string, ex Exit) {
	raw, _ := json.Marshal(ex)
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

// NewCommand stores a command session of sb in state created: spec
// (ValidateSpec checks it) runs in the guest on the first attach. The
// template's workdir and user fill what spec leaves out. Creating a
// command is activity, also when the sandbox's state refuses it.
func (s *Service) NewCommand(ctx context.Context, sb *store.Sandbox, spec agentproto.ProcessSpec) (*store.Command, error) {
	if err := ValidateSpec(spec); err != nil {
		return nil, err
	}
	s.Touch(ctx, sb.ID)
	if err := RequireState(sb, store.SandboxRunning); err != nil {
		return nil, err
	}
	s.commandDefaults(ctx, sb, &spec)
	spec.ID = store.NewID(store.PrefixCommand)
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode command spec: %w", errdefs.ErrInternal)
	}
	c := &store.Command{ID: spec.ID, TenantID: sb.TenantID, SandboxID: sb.ID, Spec: raw,
		State: store.CommandCreated, CreatedAt: time.Now().UTC()}
	if err := s.store.CreateCommand(ctx, c); err != nil {
		return nil, err
	}
	return c, nil
}

// commandDefaults fills a command's working directory and user from its
// sandbox's template when the spec leaves them out.
func (s *Service) commandDefaults(ctx context.Context, sb *store.Sandbox, spec *agentproto.ProcessSpec) {
	if spec.Cwd != "" && spec.User != "" {
		return
	}
	t, err := s.store.GetTemplateByName(ctx, sb.Template, sb.TemplateDigest)
	if err != nil {
		return // the template was deleted with force: the agent's defaults apply
	}
	d := TemplateDefaults(t)
	if spec.Cwd == "" {
		spec.Cwd = d.Workdir
	}
	if spec.User == "" {
		spec.User = d.User
	}
}

// TemplateDefaults reads a template build's runtime defaults (zero when it
// has none or they do not decode).
func TemplateDefaults(t *store.Template) template.Defaults {
	var d template.Defaults
	if len(t.Defaults) > 0 {
		_ = json.Unmarshal(t.Defaults, &d) // written by us; a bad record has no defaults
	}
	return d
}
