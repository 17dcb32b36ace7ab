package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/store"
)

// createBranch answers POST /v1/sandboxes with from_checkpoint: a new
// sandbox whose disk, memory and processes start as they were at the
// checkpoint (operation type "branch"). Its template and sizes are the
// checkpoint's: a request naming other sizes, or another template, is 400.
// Without a network policy of its own it takes its parent sandbox's.
func (s *Server) createBranch(w http.ResponseWriter, r *http.Request, req *apiv1.CreateSandboxRequest) error {
	ctx := r.Context()
	f := map[string]string{}
	if req.VCPUs != 0 || req.MemoryMiB != 0 || req.DiskMiB != 0 {
		f["from_checkpoint"] = "a branch has the checkpoint's vcpus, memory_mib and disk_mib; leave them out"
	}
	if len(f) > 0 {
		return invalid(f)
	}
	ck, err := s.readyCheckpoint(ctx, req.FromCheckpoint)
	if err != nil {
		return err
	}
	if name, _, _ := strings.Cut(req.Template, "@"); req.Template != "" && name != ck.Template {
		return invalid(map[string]string{"template": "a branch has its checkpoint's template (" + ck.Template + "); leave it out"})
	}
	v := *req
	v.Template, v.FromCheckpoint = ck.Template, ""
	if len(v.Network) == 0 {
		// A branch keeps its parent's network policy unless the request
		// names one; ${secret:…} values are resolved afresh for each request
		// the branch makes, never copied.
		if parent, err := s.store.GetSandbox(ctx, ck.TenantID, ck.SandboxID); err == nil {
			v.Network = parent.Network
		}
	}
	if err := s.validateCreate(&v); err != nil {
		return err
	}
	now := time.Now().UTC()
	sb := &store.Sandbox{
		ID: store.NewID(store.PrefixSandbox), TenantID: ck.TenantID,
		Template: ck.Template, TemplateDigest: ck.TemplateDigest, State: store.SandboxCreating,
		VCPUs: ck.VCPUs, MemoryMiB: ck.MemoryMiB, DiskMiB: ck.DiskMiB,
		Env: v.Env, Metadata: v.Metadata, Worker: s.cfg.WorkerID, Network: v.Network,
		TimeoutSeconds: v.TimeoutSeconds, IdleTimeoutSeconds: v.IdleTimeoutSeconds,
		CreatedAt: now, UpdatedAt: now, LastActivityAt: now,
	}
	if sb.Metadata == nil {
		sb.Metadata = map[string]string{}
	}
	if v.TimeoutSeconds > 0 {
		exp := now.Add(time.Duration(v.TimeoutSeconds) * time.Second)
		sb.ExpiresAt = &exp
	}
	op, err := s.svc.Branch(ctx, sb, ck)
	if err != nil {
		return err
	}
	s.log(r).Info("sandbox branch submitted", "sandbox", sb.ID, "op", op.ID, "checkpoint", ck.ID)
	writeJSON(w, http.StatusAccepted, apiv1.SandboxAndOperation{Sandbox: s.sandboxView(sb), Operation: toOperation(op)})
	return nil
}

// withUsage is the sandbox with what it occupies on its worker, when the
// worker can say at once.
func (s *Server) withUsage(ctx context.Context, sb *store.Sandbox) apiv1.Sandbox {
	out := s.sandboxView(sb)
	if !sb.State.Live() || sb.State == store.SandboxCreating {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if st, err := s.worker.Sandbox(ctx, sb.ID); err == nil {
		out.Usage = usageOf(st)
	} else {
		s.logger.Debug("sandbox usage", "sandbox", sb.ID, "err", err)
	}
	return out
}
