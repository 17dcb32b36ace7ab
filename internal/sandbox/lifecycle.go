package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// runCreate is the "create" operation: boot the sandbox on the worker and
// move it creating -> running, or -> failed with everything cleaned up.
func (s *Service) runCreate(ctx context.Context, op *store.Operation, report operation.ProgressFunc) (any, error) {
	log := s.logger.With("op", op.ID, "sandbox", op.Target)
	sb, err := s.store.GetSandbox(ctx, store.AnyTenant, op.Target)
	if err != nil {
		return nil, err
	}
	if sb.State != RuleOf(Create).During {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %s is %s, not creating", sb.ID, sb.State)
	}
	rule := RuleOf(Create)
	report(ctx, rule.Step, 10)
	spec := worker.SandboxSpec{ID: sb.ID, Template: TemplateRef(sb).String(), VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB,
		DiskMiB: sb.DiskMiB, Env: sb.Env, Hostname: sb.ID, Network: sb.Network, SecretScope: sb.TenantID}
	if op.Type == store.OpBranch {
		spec.FromCheckpoint = branchSource(op)
		rule = RuleOf(Branch)
		report(ctx, rule.Step, 10)
	}
	_, cerr := s.worker.CreateSandbox(ctx, spec)
	if cerr == nil && op.Type == store.OpBranch {
		// The branch's guest runs the processes that ran at the checkpoint:
		// they become its commands before anyone can see it running.
		if ck, err := s.store.GetCheckpoint(ctx, store.AnyTenant, spec.FromCheckpoint); err == nil {
			s.syncCommands(ctx, sb.ID, ck.SandboxID)
		} else {
			log.Warn("branch: checkpoint gone, no commands inherited", "checkpoint", spec.FromCheckpoint, "err", err)
		}
	}
	if cerr == nil {
		sb, err = s.store.TransitionSandbox(context.WithoutCancel(ctx), store.AnyTenant, sb.ID,
			rule.Running(), rule.To, nil)
		if err == nil {
			log.Info("sandbox running")
			return sb, nil
		}
		cerr = fmt.Errorf("mark sandbox running: %w", err)
	}
	log.Warn("sandbox create failed", "err", CauseString(cerr))
	s.failSandbox(ctx, sb.ID, cerr, rule.Running()...)
	return nil, cerr
}

// failSandbox tears a sandbox's VM down and records it failed with the
// tenant-safe form of cause. Commands still running end with reason "lost".
func (s *Service) failSandbox(ctx context.Context, id string, cause error, from ...store.SandboxState) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	log := s.logger.With("sandbox", id)
	if err := s.worker.DeleteSandbox(ctx, id); err != nil {
		log.Error("clean up failed sandbox", "err", err)
	}
	s.endCommands(ctx, id, agentproto.ReasonLost, nil)
	info := operation.PublicError(cause)
	if _, err := s.store.TransitionSandbox(ctx, store.AnyTenant, id, from, store.SandboxFailed, func(sb *store.Sandbox) error {
		sb.LastError = info
		return nil
	}); err != nil {
		if alreadyFailed(err) {
			// Another control replica recorded the same end first (each
			// handles every exit).
			log.Info("sandbox already marked failed")
			return
		}
		log.Error("mark sandbox failed", "err", err)
	}
}

// alreadyFailed reports whether err is the conflict of a sandbox that is
// failed already.
func alreadyFailed(err error) bool {
	var pub *errdefs.Public
	return errdefs.ClassOf(err) == errdefs.ErrConflict && errors.As(err, &pub) &&
		pub.Details["state"] == string(store.SandboxFailed)
}

// runDelete is the "delete" operation. The request already moved the
// sandbox to deleting; this ends its commands, stops the VM and marks it
// deleted. It runs to the end even when cancelled: a half-deleted sandbox
// helps no one.
func (s *Service) runDelete(ctx context.Context, op *store.Operation, report operation.ProgressFunc) (any, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	log := s.logger.With("op", op.ID, "sandbox", op.Target)
	sb, err := s.store.GetSandbox(ctx, store.AnyTenant, op.Target)
	if err != nil {
		return nil, err
	}
	rule := RuleOf(Delete)
	if sb.State == rule.To {
		// Run again after its control replica was lost (take-over): that
		// run got this far, the delete is done (but for what it may not
		// have forgotten yet).
		s.forgetPorts(ctx, sb.ID)
		return sb, nil
	}
	if sb.State != rule.During {
		return nil, errdefs.New(errdefs.ErrConflict, "sandbox %s is %s", sb.ID, sb.State).
			WithDetails(map[string]any{"state": string(sb.State)})
	}
	report(ctx, rule.Step, 30)
	// Ask the agent how each process stands, so commands that ended keep
	// their real exit and the others' exit event gets the next sequence number.
	var procs map[string]agentproto.ProcessInfo
	if ag, err := s.Agent(ctx, sb.ID); err == nil {
		lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
		if list, err := ag.List(lctx); err == nil {
			procs = map[string]agentproto.ProcessInfo{}
			for _, p := range list {
				procs[p.ID] = p
			}
		}
		lcancel()
	}
	s.endCommands(ctx, sb.ID, agentproto.ReasonSandboxDeleted, procs)
	if err := s.worker.DeleteSandbox(ctx, sb.ID); err != nil {
		return nil, fmt.Errorf("delete sandbox %s on the worker: %w", sb.ID, err)
	}
	sb, err = s.store.TransitionSandbox(ctx, store.AnyTenant, sb.ID,
		rule.Running(), rule.To, nil)
	if err != nil {
		return nil, err
	}
	s.forgetPorts(ctx, sb.ID)
	log.Info("sandbox deleted")
	return sb, nil
}

// endCommands records every command of the sandbox that has not ended as
// ended with reason. Commands that never started end the same way.
func (s *Service) endCommands(ctx context.Context, sandboxID, reason string, procs map[string]agentproto.ProcessInfo) {
	now := time.Now().UTC()
	for c, err := range store.All(ctx, s.store.ListCommands, store.CommandFilter{TenantID: store.AnyTenant, SandboxID: sandboxID}) {
		if err != nil {
			s.logger.Error("list commands to end", "sandbox", sandboxID, "err", err)
			return
		}
		if c.State == store.CommandExited {
			continue
		}
		ex := Exit{Reason: reason, EndedAt: &now, Seq: procs[c.ProcessID].LastSeq + 1}
		if p, ok := procs[c.ProcessID]; ok && p.Exit != nil {
			ex = ExitOf(p.Exit, p.LastSeq)
		}
		raw, _ := json.Marshal(ex)
		_, err := s.store.UpdateCommand(ctx, c.ID, []store.CommandState{store.CommandCreated, store.CommandRunning},
			func(c *store.Command) error {
				c.State = store.CommandExited
				c.Exit = raw
				return nil
			})
		if err != nil && errdefs.ClassOf(err) != errdefs.ErrConflict {
			s.logger.Error("end command", "command", c.ID, "err", err)
		}
	}
}
