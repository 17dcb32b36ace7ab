package sandbox

import (
	"context"

	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
)

// TemplateBuilds returns every build of name that p sees, oldest first.
func (s *Service) TemplateBuilds(ctx context.Context, p auth.Principal, name string) ([]*store.Template, error) {
	return templateBuilds(ctx, s.store, p, name)
}

// Templates returns every template build p sees, in the store's order.
func (s *Service) Templates(ctx context.Context, p auth.Principal) ([]*store.Template, error) {
	all, err := s.store.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	var out []*store.Template
	for _, t := range all {
		if Visible(p, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

func templateBuilds(ctx context.Context, st store.Store, p auth.Principal, name string) ([]*store.Template, error) {
	all, err := st.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	var out []*store.Template
	for _, t := range all {
		if t.Name == name && Visible(p, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// TemplateUse counts what uses a template (all its builds, or one): live
// sandboxes and checkpoints not failed, of every tenant.
type TemplateUse struct {
	Sandboxes   int
	Checkpoints int
	Others      bool // some user belongs to another tenant than the caller
}

func templateUsers(ctx context.Context, st store.Store, p auth.Principal, ref template.Ref) (TemplateUse, error) {
	var u TemplateUse
	uses := func(tpl, dig string) bool { return tpl == ref.Name && (ref.Digest == "" || dig == ref.Digest) }
	f := store.SandboxFilter{TenantID: store.AnyTenant, ExcludeStates: WithoutVM()}
	f.PageSize = store.MaxPageSize
	for {
		page, err := st.ListSandboxes(ctx, f)
		if err != nil {
			return u, err
		}
		for _, sb := range page.Items {
			if uses(sb.Template, sb.TemplateDigest) {
				u.Sandboxes++
				u.Others = u.Others || sb.TenantID != p.TenantID
			}
		}
		if page.NextPageToken == "" {
			break
		}
		f.PageToken = page.NextPageToken
	}
	cf := store.CheckpointFilter{TenantID: store.AnyTenant}
	cf.PageSize = store.MaxPageSize
	for {
		page, err := st.ListCheckpoints(ctx, cf)
		if err != nil {
			return u, err
		}
		for _, c := range page.Items {
			if c.State != store.CheckpointFailed && uses(c.Template, c.TemplateDigest) {
				u.Checkpoints++
				u.Others = u.Others || c.TenantID != p.TenantID
			}
		}
		if page.NextPageToken == "" {
			break
		}
		cf.PageToken = page.NextPageToken
	}
	return u, nil
}

// DeleteTemplate removes every build of ref's name that p sees, or the
// one pinned build: not found when p sees none; permission_denied for the
// built-in template, and for a global build unless p is an admin;
// conflict while one is building, and while a live sandbox or a checkpoint
// uses it, unless force (which a tenant may use only over its own
// sandboxes and checkpoints). The decision, the builder's files and the
// rows are one transaction, so no sandbox can start from a build between
// the check and the delete; files go before rows, so a failure leaves the
// rows and the delete can be retried. The worker's ready snapshots and the
// build logs go after, best effort.
func (s *Service) DeleteTemplate(ctx context.Context, p auth.Principal, ref template.Ref, force bool) (TemplateUse, []*store.Template, error) {
	var use TemplateUse
	var doomed []*store.Template
	err := s.store.Atomic(ctx, func(ctx context.Context, tx store.Store) error {
		use, doomed = TemplateUse{}, nil
		builds, err := templateBuilds(ctx, tx, p, ref.Name)
		if err != nil {
			return err
		}
		for _, t := range builds {
			if ref.Digest == "" || t.Digest == ref.Digest {
				doomed = append(doomed, t)
			}
		}
		if len(doomed) == 0 {
			return errdefs.New(errdefs.ErrNotFound, "template %q not found", ref)
		}
		if ref.Name == template.BaseName {
			return errdefs.New(errdefs.ErrPermissionDenied, "the built-in template %q cannot be deleted", ref.Name)
		}
		for _, t := range doomed {
			if t.TenantID != Owner(p) && !p.Admin {
				return errdefs.New(errdefs.ErrPermissionDenied, "template %q is global: only an admin may delete it", ref.Name)
			}
			if t.State == store.TemplateBuilding {
				return errdefs.New(errdefs.ErrConflict, "a build of template %q is running: cancel its operation first", ref.Name).
					WithDetails(map[string]any{"state": string(t.State)})
			}
		}
		if use, err = templateUsers(ctx, tx, p, ref); err != nil {
			return err
		}
		if use.Sandboxes+use.Checkpoints > 0 && (!force || (use.Others && !p.Admin)) {
			msg := "template %q is in use by %d live sandboxes and %d checkpoints: delete them first, or pass force=true"
			if force {
				msg = "template %q is in use by %d live sandboxes and %d checkpoints, some of another tenant: force cannot delete it"
			}
			return errdefs.New(errdefs.ErrConflict, msg, ref, use.Sandboxes, use.Checkpoints).
				WithDetails(map[string]any{"sandboxes": use.Sandboxes, "checkpoints": use.Checkpoints})
		}
		if s.templates.Builder != nil {
			if err := s.templates.Builder.Delete(ctx, ref.String()); err != nil && errdefs.ClassOf(err) != errdefs.ErrNotFound {
				return err
			}
		}
		for _, t := range doomed {
			if err := tx.DeleteTemplate(ctx, t.ID); err != nil && errdefs.ClassOf(err) != errdefs.ErrNotFound {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return use, nil, err
	}
	s.ForgetTemplate(ctx, ref.String())
	for _, t := range doomed {
		s.RemoveBuildLogs(ctx, t.ID)
	}
	return use, doomed, nil
}
