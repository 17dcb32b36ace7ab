package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/worker"
)

// Templates: who sees what.
//
// A build made with an admin key (and the built-in base) is global: every
// tenant sees it and may start sandboxes from it; only admins delete it. A
// build made with a tenant key belongs to that tenant: no other tenant sees
// it (404). Names are one namespace for the deployment (they name the
// template's directory on workers): a name belongs to whoever built it
// first, and building a name someone else holds is 409. A debian source's
// setup script runs as root on the build host, so only admin keys may send
// one (403 otherwise).

// TemplateDeps are what the template routes need. With Builder nil,
// POST /v1/templates answers 503; the other routes work.
type TemplateDeps struct {
	// Builder builds tenants' templates (setup scripts off).
	Builder *template.Builder
	// AdminBuilder builds admins' templates (setup scripts allowed);
	// Builder when nil.
	AdminBuilder *template.Builder
	// LogDir keeps every build's log, one file per build operation.
	LogDir string
}

// buildParams is a template_build operation's input.
type buildParams struct {
	Request template.BuildRequest `json:"request"`
	Admin   bool                  `json:"admin"`
}

// buildResult is a template_build operation's result.
type buildResult struct {
	Template apiv1.Template `json:"template"`
	Warnings []string       `json:"warnings,omitempty"`
}

func toTemplate(t *store.Template) apiv1.Template {
	out := apiv1.Template{ID: t.ID, Name: t.Name, Digest: t.Digest, State: string(t.State),
		SizeBytes: t.SizeBytes, Defaults: t.Defaults, CreatedAt: t.CreatedAt.UTC(), Scope: "tenant"}
	if t.TenantID == "" {
		out.Scope = "global"
	}
	return out
}

// owner is the tenant id a principal's builds belong to ("" for global).
func owner(p auth.Principal) string {
	if p.Admin {
		return ""
	}
	return p.TenantID
}

// visible reports whether p may see and use template build t.
func visible(p auth.Principal, t *store.Template) bool {
	return p.Admin || t.TenantID == "" || t.TenantID == p.TenantID
}

// templateBuilds returns every build of name that p sees, oldest first.
func (s *Server) templateBuilds(ctx context.Context, p auth.Principal, name string) ([]*store.Template, error) {
	all, err := s.store.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	var out []*store.Template
	for _, t := range all {
		if t.Name == name && visible(p, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

func (s *Server) validateBuild(p auth.Principal, req *apiv1.CreateTemplateRequest) error {
	f := map[string]string{}
	if err := template.ValidName(req.Name); err != nil {
		f["name"] = "must match ^[a-z0-9][a-z0-9-]{0,62}$"
	} else if req.Name == template.BaseName {
		f["name"] = "is reserved for the built-in template"
	}
	src := req.Source
	absPath := func() {
		if src.Path == "" {
			f["source.path"] = "required"
		} else if !path.IsAbs(src.Path) {
			f["source.path"] = "must be an absolute path on the server host"
		}
	}
	switch src.Type {
	case template.SourceOCI:
		switch {
		case src.Path != "" && src.Image != "":
			f["source"] = "give path or image, not both"
		case src.Image == "":
			absPath()
		}
	case template.SourceRootfs:
		absPath()
	case template.SourceDebian:
		if src.Suite == "" {
			f["source.suite"] = "required"
		}
		if src.Script != "" && !p.Admin {
			return errdefs.New(errdefs.ErrPermissionDenied,
				"a setup script runs as root on the build host: only admin keys may build with one")
		}
	case "":
		f["source.type"] = "required: oci, debian or rootfs"
	default:
		f["source.type"] = "must be oci, debian or rootfs"
	}
	// Each of these reaches a path or a command line on the build host.
	noNUL(f, "source.path", src.Path)
	noNUL(f, "source.image", src.Image)
	noNUL(f, "source.suite", src.Suite)
	noNUL(f, "source.variant", src.Variant)
	noNULs(f, "source.packages", src.Packages)
	noNUL(f, "source.script", src.Script)
	if src.Type != template.SourceDebian && (src.Suite != "" || len(src.Packages) > 0 || src.Script != "" || src.Variant != "") {
		f["source"] = "suite, variant, packages and script belong to debian sources"
	}
	if d := req.Defaults; d != nil {
		if d.VCPUs < 0 || d.VCPUs > s.cfg.MaxVCPUs {
			f["defaults.vcpus"] = fmt.Sprintf("must be between 1 and %d", s.cfg.MaxVCPUs)
		}
		if d.MemoryMiB != 0 && (d.MemoryMiB < 128 || d.MemoryMiB > s.cfg.MaxMemoryMiB) {
			f["defaults.memory_mib"] = fmt.Sprintf("must be between 128 and %d", s.cfg.MaxMemoryMiB)
		}
		if d.DiskMiB != 0 && (d.DiskMiB < 64 || d.DiskMiB > s.cfg.MaxDiskMiB) {
			f["defaults.disk_mib"] = fmt.Sprintf("must be between 64 and %d", s.cfg.MaxDiskMiB)
		}
		// These reach execve and paths in every sandbox of the template.
		noNUL(f, "defaults.user", d.User)
		noNULs(f, "defaults.start_command", d.StartCommand)
		noNULs(f, "defaults.ready_command", d.ReadyCommand)
		if noNUL(f, "defaults.workdir", d.Workdir) && d.Workdir != "" && !path.IsAbs(d.Workdir) {
			f["defaults.workdir"] = "must be an absolute path"
		}
		env := map[string]string{}
		validateEnv(d.Env, env)
		for k, v := range env {
			f["defaults."+k] = v
		}
	}
	if len(f) > 0 {
		return invalid(f)
	}
	return nil
}

func buildRequest(req *apiv1.CreateTemplateRequest) template.BuildRequest {
	src := req.Source
	out := template.BuildRequest{Name: req.Name, NoCache: req.NoCache, Source: template.Source{
		Type: src.Type, Path: src.Path, Image: src.Image, Suite: src.Suite, Variant: src.Variant,
		Packages: src.Packages, Script: src.Script,
	}}
	if d := req.Defaults; d != nil {
		out.Defaults = template.Defaults{Vcpus: d.VCPUs, MemoryMiB: d.MemoryMiB, DiskMiB: d.DiskMiB, Env: d.Env,
			Workdir: d.Workdir, User: d.User, StartCommand: d.StartCommand, ReadyCommand: d.ReadyCommand}
	}
	return out
}

func (s *Server) createTemplate(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.CreateTemplateRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	ctx := r.Context()
	p := principal(ctx)
	if err := s.validateBuild(p, &req); err != nil {
		return err
	}
	if s.templates.Builder == nil {
		return errdefs.New(errdefs.ErrUnavailable, "this server does not build templates")
	}
	all, err := s.store.ListTemplates(ctx)
	if err != nil {
		return err
	}
	for _, t := range all {
		if t.Name == req.Name && t.TenantID != owner(p) {
			return errdefs.New(errdefs.ErrConflict, "the template name %q is taken", req.Name)
		}
	}
	params, err := json.Marshal(buildParams{Request: buildRequest(&req), Admin: p.Admin})
	if err != nil {
		return fmt.Errorf("encode build: %w", errdefs.ErrInternal)
	}
	now := time.Now().UTC()
	t := &store.Template{ID: store.NewID(store.PrefixTemplate), Name: req.Name, TenantID: owner(p),
		State: store.TemplateBuilding, CreatedAt: now}
	op := &store.Operation{ID: store.NewID(store.PrefixOperation), TenantID: p.TenantID, Type: store.OpTemplateBuild,
		Target: t.ID, Params: params}
	// The log exists before the operation can run, so a reader attaching
	// right after this answer follows it from the first line.
	if _, err := s.buildLogs.open(op.ID); err != nil {
		return err
	}
	opID := op.ID
	op, err = s.ops.Submit(ctx, op, func(ctx context.Context, tx store.Store) error { return tx.UpsertTemplate(ctx, t) })
	if err != nil {
		s.buildLogs.discard(opID)
		return err
	}
	s.log(r).Info("template build submitted", "template", req.Name, "op", op.ID, "source", req.Source.Type)
	writeJSON(w, http.StatusAccepted, apiv1.TemplateAndOperation{Template: toTemplate(t), Operation: toOperation(op)})
	return nil
}

// runTemplateBuild is the template_build operation: build the image, make
// its ready snapshot, and mark the build ready; or failed, with nothing of
// it left on disk.
func (s *Server) runTemplateBuild(ctx context.Context, op *store.Operation, report operation.ProgressFunc) (any, error) {
	log := s.logger.With("op", op.ID, "template_build", op.Target)
	var params buildParams
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
		log.Warn("template build failed", "template", params.Request.Name, "err", sandbox.CauseString(err))
		s.failBuild(ctx, row, "")
		return nil, err
	}
	// A rebuild from unchanged inputs reuses an existing build (same
	// digest); its files must then survive a failure here.
	shared := false
	if prev, err := s.store.GetTemplateByName(ctx, m.Name, m.Digest); err == nil && prev.ID != row.ID {
		shared = true
	}
	if err := s.prepareSnapshot(ctx, m, blog, report); err != nil {
		blog.Printf("build failed: %s", operation.PublicError(err).Message)
		log.Warn("template ready snapshot failed", "template", m.Ref(), "err", sandbox.CauseString(err))
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
	return buildResult{Template: toTemplate(row), Warnings: m.Warnings}, nil
}

// prepareSnapshot boots the new build once and keeps its ready snapshot at
// the template's default size, so sandboxes start from memory.
func (s *Server) prepareSnapshot(ctx context.Context, m template.Metadata, blog *buildLog, report operation.ProgressFunc) error {
	lc, ok := s.worker.(worker.Lifecycle)
	if !ok {
		blog.Printf("snapshot: this worker keeps no ready snapshots; sandboxes will boot")
		return nil
	}
	report(ctx, "snapshot", 90)
	spec := worker.SandboxSpec{Template: m.Ref(), VCPUs: m.Defaults.Vcpus, MemoryMiB: m.Defaults.MemoryMiB, DiskMiB: m.Defaults.DiskMiB}
	if spec.VCPUs == 0 {
		spec.VCPUs = s.cfg.DefaultVCPUs
	}
	if spec.MemoryMiB == 0 {
		spec.MemoryMiB = s.cfg.DefaultMemoryMiB
	}
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
func (s *Server) failBuild(ctx context.Context, row *store.Template, ref string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	if ref != "" && s.templates.Builder != nil {
		if err := s.templates.Builder.Delete(ctx, ref); err != nil && errdefs.ClassOf(err) != errdefs.ErrNotFound {
			s.logger.Error("remove failed template build", "template", ref, "err", err)
		}
		s.forgetTemplate(ctx, ref)
	}
	row.State = store.TemplateFailed
	if err := s.store.UpsertTemplate(ctx, row); err != nil {
		s.logger.Error("mark template build failed", "template_build", row.ID, "err", err)
	}
}

// ReconcileTemplates marks failed every build left "building" by a previous
// process (its operation was aborted by Recover) and removes build logs
// older than buildLogMaxAge. Call it after Recover, before serving.
func (s *Server) ReconcileTemplates(ctx context.Context) error {
	if n, err := s.buildLogs.prune(time.Now().Add(-buildLogMaxAge)); err != nil {
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

// commandDefaults fills a command's working directory and user from its
// sandbox's template when the request leaves them out.
func (s *Server) commandDefaults(ctx context.Context, sb *store.Sandbox, req *apiv1.CreateCommandRequest) {
	if req.Cwd != "" && req.User != "" {
		return
	}
	t, err := s.store.GetTemplateByName(ctx, sb.Template, sb.TemplateDigest)
	if err != nil {
		return // the template was deleted with force: the agent's defaults apply
	}
	d := templateDefaults(t)
	if req.Cwd == "" {
		req.Cwd = d.Workdir
	}
	if req.User == "" {
		req.User = d.User
	}
}
