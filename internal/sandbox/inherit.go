package sandbox

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// syncCommands makes the command sessions of a sandbox whose guest was
// replaced by a checkpoint's (a branch, or a restore in place) agree with
// the processes the new guest's agent knows. source is the sandbox the
// checkpoint was taken of.
//
//   - A command of the sandbox whose process the guest knows takes the
//     state the agent reports: running again (a restore rewinds a command
//     that ended after the checkpoint) or exited with the agent's exit.
//   - A running command whose process the guest does not know ends "lost"
//     (an exit the API does not invent: the process is really gone).
//     Commands not yet started stay as they are.
//   - A process the guest knows that belonged to a command of source, and
//     that no command of the sandbox stands for yet, becomes a new command
//     session of the sandbox: a new id, source's spec, the same process id,
//     and the state, pid and start time the agent reports. This is how a
//     branch inherits the commands running (or ended) at its checkpoint.
//
// The agent addresses processes by Command.ProcessID. Failures are logged:
// the sandbox stays usable, its commands as they were.
func (s *Service) syncCommands(ctx context.Context, sandboxID, source string) {
	ctx = context.WithoutCancel(ctx)
	log := s.logger.With("sandbox", sandboxID)
	sb, err := s.store.GetSandbox(ctx, store.AnyTenant, sandboxID)
	if err != nil {
		log.Error("sync commands: get sandbox", "err", err)
		return
	}
	ag, err := s.Agent(ctx, sandboxID)
	if err != nil {
		log.Warn("sync commands: no agent", "err", err)
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	list, err := ag.List(lctx)
	cancel()
	if err != nil {
		log.Warn("sync commands: list processes", "err", err)
		return
	}
	list = guestProcesses(list, log)
	procs := make(map[string]agentproto.ProcessInfo, len(list))
	for _, p := range list {
		procs[p.ID] = p
	}
	own, err := s.allCommands(ctx, sandboxID)
	if err != nil {
		log.Error("sync commands: list", "err", err)
		return
	}
	seen := map[string]bool{}
	for _, c := range own {
		seen[c.ProcessID] = true
		if c.State == store.CommandCreated {
			continue
		}
		if p, known := procs[c.ProcessID]; known {
			s.followProcess(ctx, c, p)
		} else if c.State == store.CommandRunning {
			now := time.Now().UTC()
			raw, _ := json.Marshal(Exit{Reason: agentproto.ReasonLost, EndedAt: &now})
			if _, err := s.store.UpdateCommand(ctx, c.ID, []store.CommandState{store.CommandRunning},
				func(c *store.Command) error {
					c.State, c.Exit = store.CommandExited, raw
					return nil
				}); err != nil && errdefs.ClassOf(err) != errdefs.ErrConflict {
				log.Error("sync commands: end", "command", c.ID, "err", err)
			}
		}
	}
	if source == "" || source == sandboxID {
		return
	}
	unseen := false
	for _, p := range list {
		unseen = unseen || !seen[p.ID]
	}
	if !unseen {
		return
	}
	from, err := s.allCommands(ctx, source)
	if err != nil {
		log.Error("sync commands: list the source's", "source", source, "err", err)
		return
	}
	byProcess := map[string]*store.Command{}
	for _, c := range from {
		byProcess[c.ProcessID] = c
	}
	var inherit []*store.Command
	for _, p := range list { // agent order: start order
		parent, ok := byProcess[p.ID]
		if seen[p.ID] || !ok {
			continue
		}
		seen[p.ID] = true
		c := &store.Command{TenantID: sb.TenantID, SandboxID: sandboxID, ProcessID: p.ID, Spec: parent.Spec,
			CreatedAt: time.Now().UTC()}
		stateFromProcess(c, p)
		inherit = append(inherit, c)
	}
	if len(inherit) == 0 {
		return
	}
	// One transaction: a branch inherits all its commands or none.
	err = s.store.Atomic(ctx, func(ctx context.Context, tx store.Store) error {
		for _, c := range inherit {
			if err := tx.CreateCommand(ctx, c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		log.Error("sync commands: inherit", "commands", len(inherit), "err", err)
		return
	}
	log.Info("commands inherited", "from", source, "count", len(inherit))
}

// MaxGuestProcesses bounds the processes the host takes from one answer of
// a guest's process list (the guest is not trusted to keep its list short
// or free of repeats): past it the rest are dropped and logged. The agent
// keeps every process a sandbox started, so a sandbox with more commands
// than this loses the newest from what a branch inherits.
const MaxGuestProcesses = 1024

// guestProcesses is a guest's process list as the host uses it: each id
// once (its first entry), at most MaxGuestProcesses of them, in the
// guest's order.
func guestProcesses(list []agentproto.ProcessInfo, log *slog.Logger) []agentproto.ProcessInfo {
	seen := make(map[string]bool, min(len(list), MaxGuestProcesses))
	out := make([]agentproto.ProcessInfo, 0, min(len(list), MaxGuestProcesses))
	dups, over := 0, 0
	for _, p := range list {
		switch {
		case seen[p.ID]:
			dups++
		case len(out) == MaxGuestProcesses:
			over++
		default:
			seen[p.ID] = true
			out = append(out, p)
		}
	}
	if dups > 0 || over > 0 {
		log.Warn("guest process list: repeated ids and processes past the bound dropped",
			"listed", len(list), "repeated", dups, "over_bound", over, "bound", MaxGuestProcesses)
	}
	return out
}

// followProcess sets a command to the state the agent reports of its
// process, when that differs from the stored one.
func (s *Service) followProcess(ctx context.Context, c *store.Command, p agentproto.ProcessInfo) {
	want := *c
	stateFromProcess(&want, p)
	if want.State == c.State && string(want.Exit) == string(c.Exit) && want.PID == c.PID {
		return
	}
	_, err := s.store.UpdateCommand(ctx, c.ID, []store.CommandState{c.State}, func(cur *store.Command) error {
		stateFromProcess(cur, p)
		return nil
	})
	if err != nil && errdefs.ClassOf(err) != errdefs.ErrConflict {
		s.logger.Error("sync commands: follow the agent", "command", c.ID, "err", err)
	}
}

// stateFromProcess sets c's state, pid, start and exit as the agent
// reports them of its process.
func stateFromProcess(c *store.Command, p agentproto.ProcessInfo) {
	c.PID = p.PID
	if !p.StartedAt.IsZero() {
		started := p.StartedAt.UTC()
		c.StartedAt = &started
	}
	if p.Exit == nil {
		c.State, c.Exit = store.CommandRunning, nil
		return
	}
	c.State = store.CommandExited
	c.Exit, _ = json.Marshal(ExitOf(p.Exit, p.LastSeq))
}

// allCommands lists every command session of a sandbox, oldest first.
func (s *Service) allCommands(ctx context.Context, sandboxID string) ([]*store.Command, error) {
	var out []*store.Command
	for c, err := range store.All(ctx, s.store.ListCommands, store.CommandFilter{TenantID: store.AnyTenant, SandboxID: sandboxID}) {
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
