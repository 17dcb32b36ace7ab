package api

import (
	"context"
	"net/http"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
)

// createBranch answers POST /v1/sandboxes with from_checkpoint: a new
// sandbox whose disk, memory and processes start as they were at the
// checkpoint (operation type "branch"). Its template and sizes are the
// checkpoint's: a request naming other sizes, or another template, is 400.
// Without a network policy of its own it takes its parent sandbox's
// (sandbox.Service.BranchSandbox decides what a branch inherits).
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
	if ref, err := template.Parse(req.Template); req.Template != "" && (err != nil || ref.Name != ck.Template) {
		return invalid(map[string]string{"template": "a branch has its checkpoint's template (" + ck.Template + "); leave it out"})
	}
	v := *req
	v.Template, v.FromCheckpoint = ck.Template, ""
	in := createRequest(&v)
	if err := s.validateCreate(&v, &in); err != nil {
		return err
	}
	sb, op, err := s.svc.BranchSandbox(ctx, ck, in)
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
	if st, ok := s.svc.Usage(ctx, sb); ok {
		out.Usage = usageOf(st)
	}
	return out
}
