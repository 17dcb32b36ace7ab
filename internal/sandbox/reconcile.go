package sandbox

import (
	"context"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// Reconcile makes the store and the worker agree after a start: run it after
// the operation engine's Recover. Sandboxes left creating fail (their create
// was interrupted), deleting ones get a fresh delete operation, ones the
// worker no longer has fail with their commands lost, the others take the
// state the worker reports (a pause, suspend, wake or restore interrupted
// by the restart ends where the worker got to; suspended ones stay
// suspended), and VMs the store does not know as live are deleted.
func (s *Service) Reconcile(ctx context.Context) error {
	vms, err := s.worker.Sandboxes(ctx)
	if err != nil {
		return err
	}
	onWorker := map[string]worker.SandboxStatus{}
	for _, v := range vms {
		onWorker[v.ID] = v
	}
	live := map[string]bool{}
	err = s.eachSandbox(ctx, store.SandboxFilter{TenantID: store.AnyTenant,
		ExcludeStates: WithoutVM()}, func(sb *store.Sandbox) {
		log := s.logger.With("sandbox", sb.ID, "state", sb.State)
		vm, ok := onWorker[sb.ID]
		switch {
		case sb.State == store.SandboxCreating:
			log.Warn("reconcile: create was interrupted")
			s.failSandbox(ctx, sb.ID, errdefs.New(errdefs.ErrAborted, "sandbox creation was interrupted by a server restart"), store.SandboxCreating)
		case sb.State == store.SandboxDeleting:
			log.Warn("reconcile: resuming delete")
			live[sb.ID] = true // the delete operation removes it
			if _, err := s.ops.Submit(ctx, &store.Operation{TenantID: sb.TenantID, Type: store.OpDelete, Target: sb.ID}, nil); err != nil {
				log.Error("reconcile: resubmit delete", "err", err)
			}
		case !ok || vm.State == worker.VMStopped:
			log.Warn("reconcile: VM is gone", "lost", vm.Lost)
			why := "the sandbox's VM stopped unexpectedly"
			if vm.Lost != "" {
				why = vm.Lost
			}
			s.failSandbox(ctx, sb.ID, errdefs.New(errdefs.ErrUnavailable, "%s", why), sb.State)
		default:
			live[sb.ID] = true
			if want := storeState(vm.State); want != sb.State {
				log.Warn("reconcile: taking the worker's state", "vm_state", vm.State)
				s.settleTo(ctx, sb.ID, sb.State)
			}
		}
	})
	if err != nil {
		return err
	}
	if err := s.reconcileCheckpoints(ctx); err != nil {
		return err
	}
	for id := range onWorker {
		if !live[id] {
			s.logger.Warn("reconcile: deleting VM the store does not know as live", "sandbox", id)
			if err := s.worker.DeleteSandbox(ctx, id); err != nil {
				s.logger.Error("reconcile: delete orphan VM", "sandbox", id, "err", err)
			}
		}
	}
	return nil
}

// reconcileCheckpoints fails the checkpoints a restart interrupted: each one
// still creating belonged to an operation that operation.Recover has just
// ended as aborted. Whatever files the worker kept of it go, so that the
// failed checkpoint holds nothing and can be deleted.
func (s *Service) reconcileCheckpoints(ctx context.Context) error {
	for ck, err := range store.All(ctx, s.store.ListCheckpoints, store.CheckpointFilter{TenantID: store.AnyTenant}) {
		if err != nil {
			return err
		}
		if ck.State != store.CheckpointCreating {
			continue
		}
		log := s.logger.With("checkpoint", ck.ID, "sandbox", ck.SandboxID)
		log.Warn("reconcile: checkpoint was interrupted")
		if err := s.worker.DeleteCheckpoint(ctx, ck.ID); err != nil {
			log.Error("reconcile: remove files of interrupted checkpoint", "err", err)
			continue // stays creating; the next start tries again
		}
		if _, err := s.store.UpdateCheckpoint(ctx, ck.ID, []store.CheckpointState{store.CheckpointCreating},
			func(c *store.Checkpoint) error { c.State = store.CheckpointFailed; return nil }); err != nil {
			log.Error("reconcile: fail interrupted checkpoint", "err", err)
		}
	}
	return nil
}

// eachSandbox calls fn for every sandbox the filter selects, page by page.
func (s *Service) eachSandbox(ctx context.Context, f store.SandboxFilter, fn func(*store.Sandbox)) error {
	for sb, err := range store.All(ctx, s.store.ListSandboxes, f) {
		if err != nil {
			return err
		}
		fn(sb)
	}
	return nil
}

// Expiry scans run when the earliest known deadline is due, but at least
// this often (so sandboxes created or kept meanwhile are seen) and at most
// this often.
const (
	maxExpiryScan = 2 * time.Second
	minExpiryScan = 100 * time.Millisecond
)

// Run does the control plane's background work until ctx ends or the
// worker's exits close: RunExits and RunExpiry together (one node).
func (s *Service) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	expiry := make(chan struct{})
	go func() {
		defer close(expiry)
		s.RunExpiry(ctx)
	}()
	s.RunExits(ctx)
	cancel()
	<-expiry
}

// RunExits fails sandboxes whose VM stopped on its own (the worker's
// exits) until ctx ends or the exits close. In a cluster every control
// replica runs it, leader or not: each replica's placement sees every Pod,
// so each gets every exit, and handling one is a compare-and-set on the
// sandbox's state (the first replica records it, the others find it done),
// so no exit waits in a replica's memory for it to lead, and none is lost
// while one replica lives.
func (s *Service) RunExits(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ex, ok := <-s.worker.Exits():
			if !ok {
				return
			}
			s.handleExit(ctx, ex)
		}
	}
}

// RunExpiry deletes expired sandboxes and suspends idle ones until ctx
// ends: in a cluster, the leader's loop.
func (s *Service) RunExpiry(ctx context.Context) {
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			next := now.Add(maxExpiryScan)
			if due := s.expire(ctx, now); !due.IsZero() && due.Before(next) {
				next = due
			}
			tick.Reset(max(time.Until(next), minExpiryScan))
		}
	}
}

// handleExit fails a sandbox whose VM died; its commands end "lost".
func (s *Service) handleExit(ctx context.Context, ex worker.Exit) {
	if ex.Drain {
		s.submitDrain(ctx, ex.SandboxID) // drain.go
		return
	}
	sb, err := s.store.GetSandbox(ctx, store.AnyTenant, ex.SandboxID)
	if err != nil {
		s.logger.Warn("VM exit of unknown sandbox", "sandbox", ex.SandboxID, "err", err)
		return
	}
	switch sb.State {
	case store.SandboxRunning, store.SandboxPausing, store.SandboxPaused, store.SandboxSuspending, store.SandboxWaking:
		s.logger.Error("sandbox VM stopped unexpectedly", "sandbox", sb.ID, "err", ex.Err)
		pub := errdefs.New(errdefs.ErrUnavailable, "the sandbox's VM stopped unexpectedly")
		if ex.Lost != "" {
			pub = errdefs.New(errdefs.ErrUnavailable, "%s", ex.Lost)
		}
		if errdefs.ClassOf(ex.Err) == errdefs.ErrResourceExhausted {
			// The VMM's cgroup memory limit killed it (worker/local, vmm/qemu).
			pub = errdefs.New(errdefs.ErrResourceExhausted, "the sandbox's VM was stopped: it used more host memory than its memory size allows")
		}
		s.failSandbox(ctx, sb.ID, pub.WithCause(ex.Err), sb.State)
	default:
		// creating: the create operation reports the failure itself;
		// deleting, deleted, failed: expected.
	}
}

// expire submits a delete for every sandbox past its expires_at and a
// suspend for every one idle past its idle_timeout_seconds (each recorded
// as an operation). It returns the earliest deadline still ahead, or zero.
func (s *Service) expire(ctx context.Context, now time.Time) time.Time {
	var next time.Time
	ahead := func(t time.Time) {
		if !t.IsZero() && t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	err := s.eachSandbox(ctx, store.SandboxFilter{TenantID: store.AnyTenant, States: RuleOf(Delete).From}, func(sb *store.Sandbox) {
		if sb.ExpiresAt == nil || sb.ExpiresAt.After(now) {
			if sb.ExpiresAt != nil {
				ahead(*sb.ExpiresAt)
			}
			ahead(s.expireIdle(ctx, sb, now))
			return
		}
		op, err := s.SubmitDelete(ctx, sb.TenantID, sb.ID)
		if err != nil {
			if errdefs.ClassOf(err) != errdefs.ErrConflict {
				s.logger.Error("expire sandbox", "sandbox", sb.ID, "err", err)
			}
			return
		}
		s.life.forget(sb.ID)
		s.logger.Info("sandbox expired", "sandbox", sb.ID, "op", op.ID)
	})
	if err != nil {
		s.logger.Warn("expiry scan", "err", err)
	}
	return next
}
