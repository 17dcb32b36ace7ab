package sandbox

import (
	"context"
	"encoding/json"
	"maps"
	"time"

	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
)

// Size is what a sandbox occupies: vCPUs, memory and disk. A zero field
// of a request means "the default".
type Size struct {
	VCPUs     int
	MemoryMiB int
	DiskMiB   int
}

// Size is the size of a sandbox of a template: what the request names,
// else the template's default, else the service's (DefaultVCPUs,
// DefaultMemoryMiB; a disk without either is the template image's own,
// left 0). Creates and ready snapshots both size by it.
func (s *Service) Size(d template.Defaults, req Size) Size {
	pick := func(vals ...int) int {
		for _, v := range vals {
			if v != 0 {
				return v
			}
		}
		return 0
	}
	return Size{
		VCPUs:     pick(req.VCPUs, d.Vcpus, s.cfg.DefaultVCPUs),
		MemoryMiB: pick(req.MemoryMiB, d.MemoryMiB, s.cfg.DefaultMemoryMiB),
		DiskMiB:   pick(req.DiskMiB, d.DiskMiB),
	}
}

// CreateRequest is a request for a new sandbox (ValidateCreate checks it). Sizes left 0
// take the defaults (Size); a branch's sizes and template are its
// checkpoint's.
type CreateRequest struct {
	Template           template.Ref
	Size               Size
	Env                map[string]string
	Metadata           map[string]string
	Network            json.RawMessage
	TimeoutSeconds     int
	IdleTimeoutSeconds int
}

// Visible reports whether p may see and use template build t: a global
// build (no tenant) or the caller's own; an admin sees every build.
func Visible(p auth.Principal, t *store.Template) bool {
	return p.Admin || t.TenantID == "" || t.TenantID == p.TenantID
}

// Owner is the tenant a principal's template builds belong to ("" for
// global: an admin's builds are everyone's).
func Owner(p auth.Principal) string {
	if p.Admin {
		return ""
	}
	return p.TenantID
}

// ResolveTemplate returns the ready template build ref names for p: the
// newest ready build of the name, or exactly the pinned build. A build p
// may not see is not found; one not ready is failed_precondition
// (details.state).
func (s *Service) ResolveTemplate(ctx context.Context, p auth.Principal, ref template.Ref) (*store.Template, error) {
	t, err := s.store.GetTemplateByName(ctx, ref.Name, ref.Digest)
	if err == nil && !Visible(p, t) {
		err = errdefs.New(errdefs.ErrNotFound, "template build of another tenant")
	}
	switch {
	case err == nil:
		if t.State != store.TemplateReady {
			return nil, errdefs.New(errdefs.ErrFailedPrecondition, "template %q is not ready (state %s)", ref, t.State).
				WithDetails(map[string]any{"template": ref.String(), "state": string(t.State)})
		}
		return t, nil
	case errdefs.ClassOf(err) == errdefs.ErrNotFound:
		return nil, errdefs.New(errdefs.ErrNotFound, "template %q not found", ref).WithCause(err)
	}
	return nil, err
}

// newRecord is the record of a sandbox being created for tenant.
func (s *Service) newRecord(tenant string, req CreateRequest, now time.Time) *store.Sandbox {
	sb := &store.Sandbox{
		ID: store.NewID(store.PrefixSandbox), TenantID: tenant,
		Template: req.Template.Name, TemplateDigest: req.Template.Digest, State: store.SandboxCreating,
		VCPUs: req.Size.VCPUs, MemoryMiB: req.Size.MemoryMiB, DiskMiB: req.Size.DiskMiB,
		Env: req.Env, Metadata: req.Metadata, Worker: s.cfg.WorkerID, Network: req.Network,
		TimeoutSeconds: req.TimeoutSeconds, IdleTimeoutSeconds: req.IdleTimeoutSeconds,
		CreatedAt: now, UpdatedAt: now, LastActivityAt: now,
	}
	if sb.Metadata == nil {
		sb.Metadata = map[string]string{}
	}
	if req.TimeoutSeconds > 0 {
		exp := now.Add(time.Duration(req.TimeoutSeconds) * time.Second)
		sb.ExpiresAt = &exp
	}
	return sb
}

// CreateSandbox resolves the template p names, stores a new sandbox of
// p's tenant sized by Size (its env merged over the template's, the
// request's variables winning) and submits its create operation.
func (s *Service) CreateSandbox(ctx context.Context, p auth.Principal, req CreateRequest) (*store.Sandbox, *store.Operation, error) {
	if err := s.ValidateCreate(&req, nil); err != nil {
		return nil, nil, err
	}
	tpl, err := s.ResolveTemplate(ctx, p, req.Template)
	if err != nil {
		return nil, nil, err
	}
	d := TemplateDefaults(tpl)
	req.Template = template.Ref{Name: tpl.Name, Digest: tpl.Digest}
	req.Size = s.Size(d, req.Size)
	if len(d.Env) > 0 {
		env := maps.Clone(d.Env)
		maps.Copy(env, req.Env)
		req.Env = env
	}
	sb := s.newRecord(p.TenantID, req, time.Now().UTC())
	op, err := s.Create(ctx, sb)
	if err != nil {
		return nil, nil, err
	}
	return sb, op, nil
}

// BranchSandbox stores a new sandbox booting from checkpoint ck and
// submits its branch operation. A branch has its checkpoint's template,
// sizes and tenant; without a network policy of its own it keeps its
// parent sandbox's (${secret:…} values resolve afresh for each request the
// branch makes, never copied).
func (s *Service) BranchSandbox(ctx context.Context, ck *store.Checkpoint, req CreateRequest) (*store.Sandbox, *store.Operation, error) {
	if err := s.ValidateCreate(&req, nil); err != nil {
		return nil, nil, err
	}
	req.Template = template.Ref{Name: ck.Template, Digest: ck.TemplateDigest}
	req.Size = Size{VCPUs: ck.VCPUs, MemoryMiB: ck.MemoryMiB, DiskMiB: ck.DiskMiB}
	if len(req.Network) == 0 {
		if parent, err := s.store.GetSandbox(ctx, ck.TenantID, ck.SandboxID); err == nil {
			req.Network = parent.Network
		}
	}
	sb := s.newRecord(ck.TenantID, req, time.Now().UTC())
	op, err := s.Branch(ctx, sb, ck)
	if err != nil {
		return nil, nil, err
	}
	return sb, op, nil
}
