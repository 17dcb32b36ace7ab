package sandbox

import (
	"context"
	"time"

	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// What the edges read of the domain. Each is a plain read of the store or
// the worker; an edge calls these rather than either, so that what a read
// means (which tenant, which states) is said once, here.

// GetSandbox is tenant's sandbox id (store.AnyTenant: any tenant's).
func (s *Service) GetSandbox(ctx context.Context, tenant, id string) (*store.Sandbox, error) {
	return s.store.GetSandbox(ctx, tenant, id)
}

// ListSandboxes is a page of the sandboxes f selects.
func (s *Service) ListSandboxes(ctx context.Context, f store.SandboxFilter) (store.Page[*store.Sandbox], error) {
	return s.store.ListSandboxes(ctx, f)
}

// GetCommand is command cid of tenant's sandbox.
func (s *Service) GetCommand(ctx context.Context, tenant, sandboxID, cid string) (*store.Command, error) {
	return s.store.GetCommand(ctx, tenant, sandboxID, cid)
}

// ListCommands is a page of the commands of tenant's sandbox.
func (s *Service) ListCommands(ctx context.Context, tenant, sandboxID string, pr store.PageRequest) (store.Page[*store.Command], error) {
	return s.store.ListCommands(ctx, store.CommandFilter{TenantID: tenant, SandboxID: sandboxID, PageRequest: pr})
}

// GetOperation is tenant's operation id.
func (s *Service) GetOperation(ctx context.Context, tenant, id string) (*store.Operation, error) {
	return s.store.GetOperation(ctx, tenant, id)
}

// ListOperations is a page of tenant's operations (of target, when set).
func (s *Service) ListOperations(ctx context.Context, tenant, target string, pr store.PageRequest) (store.Page[*store.Operation], error) {
	return s.store.ListOperations(ctx, store.OperationFilter{TenantID: tenant, Target: target, PageRequest: pr})
}

// Suspend submits the suspend of sb (conflict, with details.state, when
// sb is in none of the states a suspend starts from).
func (s *Service) Suspend(ctx context.Context, sb *store.Sandbox) (*store.Operation, error) {
	return s.SubmitOn(ctx, sb, store.OpSuspend, RuleOf(Suspend).From, nil)
}

// Wake submits the wake of sb (conflict, with details.state, when sb is
// in none of the states a wake starts from).
func (s *Service) Wake(ctx context.Context, sb *store.Sandbox) (*store.Operation, error) {
	return s.SubmitOn(ctx, sb, store.OpWake, RuleOf(Wake).From, nil)
}

// WaitOperation is tenant's operation id once it has ended, or as it
// stands when wait has passed.
func (s *Service) WaitOperation(ctx context.Context, tenant, id string, wait time.Duration) (*store.Operation, error) {
	return s.ops.Wait(ctx, tenant, id, wait)
}

// NetworkLog is what the worker recorded of a sandbox's traffic.
func (s *Service) NetworkLog(ctx context.Context, sandboxID string) ([]worker.NetworkRecord, error) {
	return s.worker.NetworkLog(ctx, sandboxID)
}

// Usage is what a sandbox occupies on its worker now, when the worker can
// say within 2s; false when it cannot or the sandbox has no VM running.
func (s *Service) Usage(ctx context.Context, sb *store.Sandbox) (worker.SandboxStatus, bool) {
	if !sb.State.Live() || sb.State == store.SandboxCreating {
		return worker.SandboxStatus{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := s.worker.Sandbox(ctx, sb.ID)
	if err != nil {
		s.logger.Debug("sandbox usage", "sandbox", sb.ID, "err", err)
		return worker.SandboxStatus{}, false
	}
	return st, true
}

// WorkerOf names the worker sb is on: behind a fleet, the host its VM is
// placed on now ("" while suspended or not placed); else its record's.
func (s *Service) WorkerOf(sb *store.Sandbox) string {
	host, fleet := s.HostOf(sb.ID)
	if !fleet {
		return sb.Worker
	}
	if sb.State.Live() && sb.State != store.SandboxSuspended {
		return host
	}
	return ""
}

// HostOf names the host sandbox id's VM is placed on behind a fleet of
// hosts (a cluster's placement; "" when on none); fleet is false for one
// local worker, which has no hosts to name.
func (s *Service) HostOf(id string) (host string, fleet bool) {
	f, ok := s.worker.(worker.Fleet)
	if !ok {
		return "", false
	}
	return f.HostOf(id), true
}

// Hosts lists a fleet's hosts; fleet is false for one local worker.
func (s *Service) Hosts(ctx context.Context) (hosts []worker.HostStatus, fleet bool, err error) {
	f, ok := s.worker.(worker.Fleet)
	if !ok {
		return nil, false, nil
	}
	hosts, err = f.Hosts(ctx)
	return hosts, true, err
}

// WorkerSimulated says whether the (single) worker simulates its
// sandboxes (worker.Simulator) instead of running VMs.
func (s *Service) WorkerSimulated() bool {
	sim, ok := s.worker.(worker.Simulator)
	return ok && sim.Simulated()
}

// WorkerReady says whether the (single) worker can take a sandbox now.
func (s *Service) WorkerReady(ctx context.Context) error { return s.worker.Ready(ctx) }

// Allocated is what the (single) worker's running and paused VMs take.
func (s *Service) Allocated(ctx context.Context) (worker.Resources, error) {
	vms, err := s.worker.Sandboxes(ctx)
	if err != nil {
		return worker.Resources{}, err
	}
	var r worker.Resources
	for _, vm := range vms {
		if vm.State == worker.VMRunning || vm.State == worker.VMPaused {
			r.VCPUs += vm.Spec.VCPUs
			r.MemoryMiB += vm.Spec.MemoryMiB
			r.Sandboxes++
		}
	}
	return r, nil
}
