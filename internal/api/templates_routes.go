package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
)

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	p := principal(ctx)
	ts, err := s.store.ListTemplates(ctx)
	if err != nil {
		return err
	}
	var seen []*store.Template
	for _, t := range ts {
		if visible(p, t) {
			seen = append(seen, t)
		}
	}
	// Ordered by name, then oldest build first; the key sorts the same way.
	sort.SliceStable(seen, func(i, j int) bool { return templateKey(seen[i]) < templateKey(seen[j]) })
	page, next, err := pageInMemory(r, seen, templateKey)
	if err != nil {
		return err
	}
	out := apiv1.TemplateList{Templates: []apiv1.Template{}, NextPageToken: next}
	for _, t := range page {
		out.Templates = append(out.Templates, toTemplate(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// templateKey orders template builds: by name, then by creation, then id.
func templateKey(t *store.Template) string {
	return fmt.Sprintf("%s\x00%020d\x00%s", t.Name, t.CreatedAt.UnixNano(), t.ID)
}

// templateRef reads the {name} path value: "name" or "name@sha256:…".
func templateRef(r *http.Request) (name, digest string, err error) {
	ref := r.PathValue("name")
	name, digest, err = template.ParseRef(ref)
	if err != nil {
		return "", "", invalid(map[string]string{"name": "must be a template name, optionally followed by @sha256:<64 hex digits>"})
	}
	return name, digest, nil
}

// getTemplate answers the newest ready build of a name (or, while none is
// ready, its newest build in any state), or exactly the pinned build.
func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) error {
	name, digest, err := templateRef(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	builds, err := s.templateBuilds(ctx, principal(ctx), name)
	if err != nil {
		return err
	}
	var pick *store.Template
	for _, t := range builds { // oldest first: the last match is the newest
		switch {
		case digest != "":
			if t.Digest == digest {
				pick = t
			}
		case t.State == store.TemplateReady:
			pick = t
		}
	}
	if pick == nil && digest == "" && len(builds) > 0 {
		pick = builds[len(builds)-1]
	}
	if pick == nil {
		return errdefs.New(errdefs.ErrNotFound, "template %q not found", r.PathValue("name"))
	}
	writeJSON(w, http.StatusOK, toTemplate(pick))
	return nil
}

// templateUse counts what uses a template (all its builds, or one).
type templateUse struct {
	Sandboxes   int  `json:"sandboxes"`
	Checkpoints int  `json:"checkpoints"`
	others      bool // some user belongs to another tenant than the caller
}

func (s *Server) templateUsers(ctx context.Context, p auth.Principal, name, digest string) (templateUse, error) {
	var u templateUse
	uses := func(tpl, dig string) bool { return tpl == name && (digest == "" || dig == digest) }
	for sb, err := range store.All(ctx, s.store.ListSandboxes, store.SandboxFilter{TenantID: store.AnyTenant, ExcludeStates: sandbox.WithoutVM()}) {
		if err != nil {
			return u, err
		}
		if uses(sb.Template, sb.TemplateDigest) {
			u.Sandboxes++
			u.others = u.others || sb.TenantID != p.TenantID
		}
	}
	for c, err := range store.All(ctx, s.store.ListCheckpoints, store.CheckpointFilter{TenantID: store.AnyTenant}) {
		if err != nil {
			return u, err
		}
		if c.State != store.CheckpointFailed && uses(c.Template, c.TemplateDigest) {
			u.Checkpoints++
			u.others = u.others || c.TenantID != p.TenantID
		}
	}
	return u, nil
}

// deleteTemplate removes every build of a name, or one pinned build: 409
// while a live sandbox or a checkpoint uses it, unless force=true (which a
// tenant may use only over its own sandboxes and checkpoints).
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) error {
	name, digest, err := templateRef(r)
	if err != nil {
		return err
	}
	force := r.URL.Query().Get("force") == "true"
	ctx := r.Context()
	p := principal(ctx)
	ref := r.PathValue("name")
	builds, err := s.templateBuilds(ctx, p, name)
	if err != nil {
		return err
	}
	var doomed []*store.Template
	for _, t := range builds {
		if digest == "" || t.Digest == digest {
			doomed = append(doomed, t)
		}
	}
	if len(doomed) == 0 {
		return errdefs.New(errdefs.ErrNotFound, "template %q not found", ref)
	}
	if name == template.BaseName {
		return errdefs.New(errdefs.ErrPermissionDenied, "the built-in template %q cannot be deleted", name)
	}
	for _, t := range doomed {
		if t.TenantID != owner(p) && !p.Admin {
			return errdefs.New(errdefs.ErrPermissionDenied, "template %q is global: only an admin may delete it", name)
		}
		if t.State == store.TemplateBuilding {
			return errdefs.New(errdefs.ErrConflict, "a build of template %q is running: cancel its operation first", name).
				WithDetails(map[string]any{"state": string(t.State)})
		}
	}
	use, err := s.templateUsers(ctx, p, name, digest)
	if err != nil {
		return err
	}
	if use.Sandboxes+use.Checkpoints > 0 && (!force || (use.others && !p.Admin)) {
		msg := "template %q is in use by %d live sandboxes and %d checkpoints: delete them first, or pass force=true"
		if force {
			msg = "template %q is in use by %d live sandboxes and %d checkpoints, some of another tenant: force cannot delete it"
		}
		return errdefs.New(errdefs.ErrConflict, msg, ref, use.Sandboxes, use.Checkpoints).
			WithDetails(map[string]any{"sandboxes": use.Sandboxes, "checkpoints": use.Checkpoints})
	}
	if err := s.svc.DeleteTemplate(ctx, ref, doomed); err != nil {
		return err
	}
	s.log(r).Info("template deleted", "template", ref, "builds", len(doomed), "force", force,
		"sandboxes", use.Sandboxes, "checkpoints", use.Checkpoints)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// templateBuildLog streams a build's log (see streamBuildLog).
func (s *Server) templateBuildLog(w http.ResponseWriter, r *http.Request) error {
	after, err := afterParam(r)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	id := r.PathValue("operation")
	notFound := errdefs.New(errdefs.ErrNotFound, "build %q of template %q not found", id, name)
	if !validID(id, store.PrefixOperation) {
		return notFound
	}
	op, err := s.store.GetOperation(r.Context(), principal(r.Context()).TenantID, id)
	if err != nil {
		return notFoundAs(err, "operation", id)
	}
	var params sandbox.BuildParams
	if op.Type != store.OpTemplateBuild || json.Unmarshal(op.Params, &params) != nil || params.Request.Name != name {
		return notFound
	}
	return s.streamBuildLog(w, r, op, after)
}
