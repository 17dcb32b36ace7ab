package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker"
)

// TemplateDeps build templates. With Builder nil, SubmitBuild is
// unavailable; the rest works.
type TemplateDeps struct {
	// Builder builds tenants' templates (setup scripts off).
	Builder TemplateBuilder
	// AdminBuilder builds admins' templates (setup scripts allowed);
	// Builder when nil.
	AdminBuilder TemplateBuilder
	// LogDir keeps every build's log, one file per build operation.
	LogDir string
	// Publish, when set, gets each successful build before its ready
	// snapshot is made and before it is recorded ready: dir is the build's
	// directory (template.BuildDir(TemplatesDir, m.Name, m.Digest)) and
	// m.Digest names it. A cluster's control plane sets it to put the image
	// where every worker finds it by digest (object storage), so the
	// workers' ready snapshots and creates can fetch it; an error fails the
	// build.
	Publish func(ctx context.Context, dir string, m template.Metadata) error
	// TemplatesDir is where the builders write builds (for Publish's dir).
	TemplatesDir string
}

// TemplateBuilder builds template images and removes builds: a
// *template.Builder on one node; on a cluster's control plane, a worker's
// builds over the worker protocol (the control plane needs no root,
// mmdebstrap or agent).
type TemplateBuilder interface {
	Build(ctx context.Context, req template.BuildRequest, progress template.ProgressFunc, buildLog io.Writer) (template.Metadata, error)
	Delete(ctx context.Context, ref string) error
}

// BuildParams is a template_build operation's input.
type BuildParams struct {
	Request template.BuildRequest `json:"request"`
	Admin   bool                  `json:"admin"`
}

// runTemplateBuild is the template_build operation: build the image, make
// its ready snapshot, and mark the build ready; or failed, with nothing of
// it left on disk.
func (s *Service) runTemplateBuild(ctx context.Context, op *store.Operation, report operation.ProgressFunc) (any, error) {
	log := s.logger.With("op", op.ID, "template_build", op.Target)
	var params BuildParams
	if err := json.Unmarshal(op.Params, &params); err != nil {
		return nil, fmt.Errorf("decode build params: %v: %w", err, errdefs.ErrInternal)
	}
	row, err := s.store.GetTemplate(ctx, op.Target)
	if err != nil {
		return nil, err
	}
	if row.State != store.TemplateBuilding {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "template build %s is %s, not building", row.ID, row.State)
	}
	blog := s.buildLogs.get(op.ID)
	if blog == nil {
		if blog, err = s.buildLogs.open(op.ID); err != nil {
			s.failBuild(ctx, row, "")
			return nil, err
		}
	}
	defer s.buildLogs.finish(op.ID)

	builder := s.templates.Builder
	if params.Admin && s.templates.AdminBuilder != nil {
		builder = s.templates.AdminBuilder
	}
	progress := func(step string, percent int) { report(ctx, step, percent*88/100) }
	m, err := builder.Build(ctx, params.Request, progress, blog)
	if err != nil {
		blog.Printf("build failed: %s", operation.PublicError(err).Message)
		log.Warn("template build failed", "template", params.Request.Name, "err", CauseString(err))
		s.failBuild(ctx, row, "")
		return nil, err
	}
	// A rebuild from unchanged inputs reuses an existing build (same
	// digest); its files must then survive a failure here.
	shared := false
	if prev, err := s.store.GetTemplateByName(ctx, m.Name, m.Digest); err == nil && prev.ID != row.ID {
		shared = true
	}
	if err := s.publish(ctx, m, blog); err != nil {
		log.Warn("template publish failed", "template", m.Ref(), "err", CauseString(err))
		del := m.Ref()
		if shared {
			del = ""
		}
		s.failBuild(ctx, row, del)
		return nil, err
	}
	if err := s.prepareSnapshot(ctx, m, blog, report); err != nil {
		blog.Printf("build failed: %s", operation.PublicError(err).Message)
		log.Warn("template ready snapshot failed", "template", m.Ref(), "err", CauseString(err))
		del := m.Ref()
		if shared {
			del = ""
		}
		s.failBuild(ctx, row, del)
		return nil, err
	}
	defaults, err := json.Marshal(m.Defaults)
	if err != nil {
		return nil, fmt.Errorf("encode defaults: %w", errdefs.ErrInternal)
	}
	err = s.store.Atomic(context.WithoutCancel(ctx), func(ctx context.Context, tx store.Store) error {
		if prev, err := tx.GetTemplateByName(ctx, m.Name, m.Digest); err == nil && prev.ID != row.ID {
			// Sandboxes name builds by digest, so the older row can go:
			// this one takes its place as the newest.
			if err := tx.DeleteTemplate(ctx, prev.ID); err != nil {
				return err
			}
		}
		row.State, row.Digest, row.SizeBytes, row.Defaults = store.TemplateReady, m.Digest, m.SizeBytes, defaults
		row.CreatedAt = time.Now().UTC()
		return tx.UpsertTemplate(ctx, row)
	})
	if err != nil {
		s.failBuild(ctx, row, "")
		return nil, err
	}
	blog.Printf("ready: %s", m.Ref())
	log.Info("template ready", "template", m.Ref())
	return BuildResult{Template: row, Warnings: m.Warnings}, nil
}

// publish hands a new build to TemplateDeps.Publish, when set.
func (s *Service) publish(ctx context.Context, m template.Metadata, blog *buildLog) error {
	if s.templates.Publish == nil {
		return nil
	}
	if err := s.templates.Publish(ctx, template.BuildDir(s.templates.TemplatesDir, m.Name, m.Digest), m); err != nil {
		blog.Printf("build failed: publishing the image: %s", operation.PublicError(err).Message)
		return err
	}
	blog.Printf("published: %s", m.Ref())
	return nil
}

// prepareSnapshot boots the new build once and keeps its ready snapshot at
// the template's default size, so sandboxes start from memory.
func (s *Service) prepareSnapshot(ctx context.Context, m template.Metadata, blog *buildLog, report operation.ProgressFunc) error {
	lc, ok := s.worker.(worker.Lifecycle)
	if !ok {
		blog.Printf("snapshot: this worker keeps no ready snapshots; sandboxes will boot")
		return nil
	}
	report(ctx, "snapshot", 90)
	// The snapshot has the size a sandbox of the template gets by default.
	size := s.Size(m.Defaults, Size{})
	spec := worker.SandboxSpec{Template: m.Ref(), VCPUs: size.VCPUs, MemoryMiB: size.MemoryMiB, DiskMiB: size.DiskMiB}
	blog.Printf("snapshot: booting %s (%d vCPU, %d MiB) to keep a ready snapshot", m.Ref(), spec.VCPUs, spec.MemoryMiB)
	started := time.Now()
	err := lc.PrepareTemplate(ctx, spec)
	switch {
	case err == nil:
		blog.Printf("snapshot: ready in %s", time.Since(started).Round(time.Millisecond))
		return nil
	case errdefs.ClassOf(err) == errdefs.ErrFailedPrecondition:
		blog.Printf("snapshot: this worker keeps no ready snapshots; sandboxes will boot")
		return nil
	case ctx.Err() != nil:
		return err
	}
	return errdefs.New(errdefs.ErrFailedPrecondition,
		"the template was built but does not boot to a ready guest agent (see the build log)").WithCause(err)
}

// failBuild marks a build failed and removes the files of ref (when not
// empty) so a failed build leaves nothing behind.
func (s *Service) failBuild(ctx context.Context, row *store.Template, ref string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	if ref != "" && s.templates.Builder != nil {
		if err := s.templates.Builder.Delete(ctx, ref); err != nil && errdefs.ClassOf(err) != errdefs.ErrNotFound {
			s.logger.Error("remove failed template build", "template", ref, "err", err)
		}
		s.ForgetTemplate(ctx, ref)
	}
	row.State = store.TemplateFailed
	if err := s.store.UpsertTemplate(ctx, row); err != nil {
		s.logger.Error("mark template build failed", "template_build", row.ID, "err", err)
	}
}

// ReconcileTemplates marks failed every build left "building" by a previous
// process (its operation was aborted by Recover) and removes build logs
// older than BuildLogMaxAge. Call it after Recover, before serving.
func (s *Service) ReconcileTemplates(ctx context.Context) error {
	if n, err := s.buildLogs.prune(time.Now().Add(-BuildLogMaxAge)); err != nil {
		s.logger.Warn("prune template build logs", "err", err)
	} else if n > 0 {
		s.logger.Info("old template build logs removed", "logs", n)
	}
	all, err := s.store.ListTemplates(ctx)
	if err != nil {
		return err
	}
	for _, t := range all {
		if t.State != store.TemplateBuilding {
			continue
		}
		t.State = store.TemplateFailed
		if err := s.store.UpsertTemplate(ctx, t); err != nil {
			return err
		}
		s.logger.Warn("template build interrupted by a restart: marked failed", "template", t.Name, "template_build", t.ID)
	}
	return nil
}

// ForgetTemplate has the worker drop its ready snapshots of ref, whose files
// are gone. A failure only leaves a cache entry behind (the worker prunes it
// at its next start), so it is logged, not answered.
func (s *Service) ForgetTemplate(ctx context.Context, ref string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	if err := s.worker.ForgetTemplate(ctx, ref); err != nil {
		s.logger.Warn("worker kept ready snapshots of a deleted template", "template", ref, "err", err)
	}
}

// RemoveBuildLogs deletes the logs of the build operations of template
// build id. A failure leaves a log for the age-based prune.
func (s *Service) RemoveBuildLogs(ctx context.Context, id string) {
	ops, err := s.store.ListOperations(ctx, store.OperationFilter{TenantID: store.AnyTenant, Target: id})
	if err != nil {
		s.logger.Warn("list the build operations of a deleted template", "template_build", id, "err", err)
		return
	}
	for _, op := range ops.Items {
		if op.Type != store.OpTemplateBuild {
			continue
		}
		if err := s.buildLogs.remove(op.ID); err != nil {
			s.logger.Warn("remove the build log of a deleted template", "template_build", id, "op", op.ID, "err", err)
		}
	}
}

// BuildResult is a template_build operation's result.
type BuildResult struct {
	Template *store.Template
	Warnings []string
}

// SubmitBuild submits the build of req as a template_build operation of
// tenantID. The build belongs to owner ("" for global); admin builds may
// run setup scripts. A name another owner holds is a conflict. The build's
// log exists before the operation can run, so a reader attaching right
// after this returns follows it from the first line.
func (s *Service) SubmitBuild(ctx context.Context, tenantID, owner string, admin bool, req template.BuildRequest) (*store.Template, *store.Operation, error) {
	if s.templates.Builder == nil {
		return nil, nil, errdefs.New(errdefs.ErrUnavailable, "this server does not build templates")
	}
	all, err := s.store.ListTemplates(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, t := range all {
		if t.Name == req.Name && t.TenantID != owner {
			return nil, nil, errdefs.New(errdefs.ErrConflict, "the template name %q is taken", req.Name)
		}
	}
	params, err := json.Marshal(BuildParams{Request: req, Admin: admin})
	if err != nil {
		return nil, nil, fmt.Errorf("encode build: %w", errdefs.ErrInternal)
	}
	now := time.Now().UTC()
	t := &store.Template{ID: store.NewID(store.PrefixTemplate), Name: req.Name, TenantID: owner,
		State: store.TemplateBuilding, CreatedAt: now}
	op := &store.Operation{ID: store.NewID(store.PrefixOperation), TenantID: tenantID, Type: store.OpTemplateBuild,
		Target: t.ID, Params: params}
	if _, err := s.buildLogs.open(op.ID); err != nil {
		return nil, nil, err
	}
	opID := op.ID
	op, err = s.ops.Submit(ctx, op, func(ctx context.Context, tx store.Store) error { return tx.UpsertTemplate(ctx, t) })
	if err != nil {
		s.buildLogs.discard(opID)
		return nil, nil, err
	}
	return t, op, nil
}
