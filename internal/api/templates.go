package api

import (
	"net/http"
	"path"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
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
		s.svc.SizeFields("defaults.", sandbox.Size{VCPUs: d.VCPUs, MemoryMiB: d.MemoryMiB, DiskMiB: d.DiskMiB}, f)
		// These reach execve and paths in every sandbox of the template.
		noNUL(f, "defaults.user", d.User)
		noNULs(f, "defaults.start_command", d.StartCommand)
		noNULs(f, "defaults.ready_command", d.ReadyCommand)
		if noNUL(f, "defaults.workdir", d.Workdir) && d.Workdir != "" && !path.IsAbs(d.Workdir) {
			f["defaults.workdir"] = "must be an absolute path"
		}
		env := map[string]string{}
		sandbox.EnvFields(d.Env, env)
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
	t, op, err := s.svc.SubmitBuild(ctx, p.TenantID, sandbox.Owner(p), p.Admin, buildRequest(&req))
	if err != nil {
		return err
	}
	s.log(r).Info("template build submitted", "template", req.Name, "op", op.ID, "source", req.Source.Type)
	writeJSON(w, http.StatusAccepted, apiv1.TemplateAndOperation{Template: toTemplate(t), Operation: toOperation(op)})
	return nil
}
