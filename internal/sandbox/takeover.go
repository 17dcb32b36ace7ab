package sandbox

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// ReconcileTakenOver makes the target of an operation true again when its
// control replica was lost while it ran: the operation engine's TakenOver,
// called while the operation still runs (so it still holds its target),
// before the engine ends it. It is Reconcile for just that target, so it
// is safe while other replicas work on other sandboxes, and idempotent (a
// replica lost while it runs leaves the operation for the next to do
// again): a sandbox left creating fails (its VM, if the worker made one,
// is deleted); one left pausing, suspending or waking takes the state its
// worker reports, or fails when its VM is gone; a checkpoint left creating
// fails with whatever files it had removed; a template build left building
// fails. A delete is finished rather than failed: rerun is true, so the
// engine runs the delete's handler again (it goes on from deleting, or
// finds the sandbox deleted already and succeeds). A
// sandbox left deleting by another operation gets a delete when none is
// unfinished.
func (s *Service) ReconcileTakenOver(ctx context.Context, op *store.Operation) (rerun bool) {
	log := s.logger.With("op", op.ID, "type", op.Type, "target", op.Target)
	if op.Type == store.OpTemplateBuild {
		s.failTakenOverBuild(ctx, op)
		return false
	}
	if op.Type == store.OpCheckpoint {
		s.failTakenOverCheckpoint(ctx, op)
	}
	sb, err := s.store.GetSandbox(ctx, store.AnyTenant, op.Target)
	if err != nil {
		log.Warn("take over: target unreadable", "err", err)
		return false
	}
	switch sb.State {
	case creating:
		log.Warn("take over: create was interrupted")
		s.failSandbox(ctx, sb.ID, errdefs.New(errdefs.ErrAborted, "sandbox creation was interrupted: its control replica was lost"), creating)
	case deleting, deleted:
		if op.Type == store.OpDelete {
			log.Warn("take over: finishing delete", "state", sb.State)
			return true
		}
		if sb.State == deleting {
			s.deleteUnlessUnderWay(ctx, sb, log)
		}
	case pausing, suspending, waking:
		log.Warn("take over: taking the worker's state", "state", sb.State)
		s.settleTo(ctx, sb.ID, sb.State)
		s.finishDrainWake(ctx, op, log)
	case suspended:
		s.finishDrainWake(ctx, op, log) // lost between a drain's end and its wake
	case running, paused:
		if st, err := s.worker.Sandbox(ctx, sb.ID); errdefs.ClassOf(err) == errdefs.ErrNotFound || (err == nil && st.State == worker.VMStopped) {
			why := "the sandbox's VM stopped unexpectedly"
			if st.Lost != "" {
				why = st.Lost
			}
			s.failSandbox(ctx, sb.ID, errdefs.New(errdefs.ErrUnavailable, "%s", why), sb.State)
		}
	}
	return false
}

// deleteUnlessUnderWay submits a delete of a sandbox left deleting, unless
// one is unfinished (it runs once the taken-over operation ends).
func (s *Service) deleteUnlessUnderWay(ctx context.Context, sb *store.Sandbox, log *slog.Logger) {
	for o, err := range store.All(ctx, s.store.ListOperations, store.OperationFilter{TenantID: store.AnyTenant, Target: sb.ID}) {
		if err != nil {
			log.Error("take over: list the sandbox's operations", "err", err)
			return
		}
		if o.Type == store.OpDelete && !o.State.Terminal() {
			return
		}
	}
	log.Warn("take over: resubmitting delete")
	if _, err := s.ops.Submit(ctx, &store.Operation{TenantID: sb.TenantID, Type: store.OpDelete, Target: sb.ID}, nil); err != nil {
		log.Error("take over: resubmit delete", "err", err)
	}
}

// failTakenOverCheckpoint fails the checkpoint a lost replica was making.
func (s *Service) failTakenOverCheckpoint(ctx context.Context, op *store.Operation) {
	var p CheckpointParams
	if err := json.Unmarshal(op.Params, &p); err != nil || p.Checkpoint == "" {
		return
	}
	log := s.logger.With("op", op.ID, "checkpoint", p.Checkpoint)
	if err := s.worker.DeleteCheckpoint(ctx, p.Checkpoint); err != nil && errdefs.ClassOf(err) != errdefs.ErrNotFound {
		log.Error("take over: remove files of interrupted checkpoint", "err", err)
	}
	if _, err := s.store.UpdateCheckpoint(ctx, p.Checkpoint, []store.CheckpointState{store.CheckpointCreating},
		func(c *store.Checkpoint) error { c.State = store.CheckpointFailed; return nil }); err != nil && errdefs.ClassOf(err) != errdefs.ErrConflict {
		log.Error("take over: fail interrupted checkpoint", "err", err)
	}
}

// failTakenOverBuild fails the template build a lost replica was running.
func (s *Service) failTakenOverBuild(ctx context.Context, op *store.Operation) {
	all, err := s.store.ListTemplates(ctx)
	if err != nil {
		s.logger.Error("take over: list templates", "op", op.ID, "err", err)
		return
	}
	for _, t := range all {
		if t.ID != op.Target || t.State != store.TemplateBuilding {
			continue
		}
		t.State = store.TemplateFailed
		if err := s.store.UpsertTemplate(ctx, t); err != nil {
			s.logger.Error("take over: fail interrupted template build", "template_build", t.ID, "err", err)
			continue
		}
		s.logger.Warn("template build interrupted: its control replica was lost", "template", t.Name, "template_build", t.ID)
	}
}

// ReconcileLive fails the running and paused sandboxes whose VM the worker
// no longer has (gone, or stopped), with their commands lost: the loop a
// cluster's leader runs, for what no exit reported (a Pod gone while no
// replica watched). Unlike Reconcile it leaves every sandbox in a
// transition alone (its operation, live or taken over, settles it), so it
// is safe while other replicas work. It does nothing when the worker
// cannot list its VMs. One its worker lists suspended was drained off its
// node: that gets the drain's suspend operation (drain.go).
func (s *Service) ReconcileLive(ctx context.Context) error {
	var live []*store.Sandbox
	if err := s.eachSandbox(ctx, store.SandboxFilter{TenantID: store.AnyTenant, States: []store.SandboxState{running, paused}},
		func(sb *store.Sandbox) { live = append(live, sb) }); err != nil {
		return err
	}
	if len(live) == 0 {
		return nil
	}
	// Listed after the sandboxes: a VM made meanwhile is for a sandbox not
	// in live.
	vms, err := s.worker.Sandboxes(ctx)
	if err != nil {
		return err
	}
	onWorker := map[string]worker.SandboxStatus{}
	for _, v := range vms {
		onWorker[v.ID] = v
	}
	for _, sb := range live {
		if vm, ok := onWorker[sb.ID]; ok && vm.State == worker.VMSuspended {
			// Suspended under it (a node drain no Exit reported).
			s.submitDrain(ctx, sb.ID) // drain.go
			continue
		}
		if vm, ok := onWorker[sb.ID]; ok && vm.State != worker.VMStopped {
			continue
		}
		// Read again: it may have moved on (suspended, deleted) since.
		cur, err := s.store.GetSandbox(ctx, store.AnyTenant, sb.ID)
		if err != nil || (cur.State != running && cur.State != paused) {
			continue
		}
		st, err := s.worker.Sandbox(ctx, sb.ID)
		if err != nil && errdefs.ClassOf(err) != errdefs.ErrNotFound {
			continue // cannot tell now
		}
		if err == nil && st.State != worker.VMStopped {
			continue
		}
		why := "the sandbox's VM stopped unexpectedly"
		if st.Lost != "" {
			why = st.Lost
		}
		s.logger.Warn("reconcile: VM is gone", "sandbox", sb.ID, "state", cur.State, "lost", st.Lost)
		s.failSandbox(ctx, sb.ID, errdefs.New(errdefs.ErrUnavailable, "%s", why), cur.State)
	}
	return nil
}

// finishDrainWake submits the wake that a lost replica's drain of a
// running sandbox would have submitted at its end (drain.go), when the
// sandbox reads suspended and no wake was submitted since the drain.
func (s *Service) finishDrainWake(ctx context.Context, op *store.Operation, log *slog.Logger) {
	p, drain := drainParamsOf(op)
	if !drain || !p.WasRunning {
		return
	}
	sb, err := s.store.GetSandbox(ctx, store.AnyTenant, op.Target)
	if err != nil || sb.State != suspended {
		return
	}
	f := store.OperationFilter{TenantID: store.AnyTenant, Target: sb.ID}
	f.PageSize = 20 // newest first: a wake since the drain is among the latest
	page, err := s.store.ListOperations(ctx, f)
	if err != nil {
		log.Error("take over: list the sandbox's operations", "err", err)
		return
	}
	for _, o := range page.Items {
		if o.Type == store.OpWake && !o.CreatedAt.Before(op.CreatedAt) {
			return
		}
	}
	log.Warn("take over: waking the sandbox its lost drain suspended")
	s.wakeDrained(ctx, sb, log)
}
