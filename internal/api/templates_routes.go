package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
)

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	seen, err := s.svc.Templates(ctx, principal(ctx))
	if err != nil {
		return err
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
func templateRef(r *http.Request) (template.Ref, error) {
	ref, err := template.Parse(r.PathValue("name"))
	if err != nil {
		return template.Ref{}, invalid(map[string]string{"name": "must be a template name, optionally followed by @sha256:<64 hex digits>"})
	}
	return ref, nil
}

// getTemplate answers the newest ready build of a name (or, while none is
// ready, its newest build in any state), or exactly the pinned build.
func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) error {
	ref, err := templateRef(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	builds, err := s.svc.TemplateBuilds(ctx, principal(ctx), ref.Name)
	if err != nil {
		return err
	}
	var pick *store.Template
	for _, t := range builds { // oldest first: the last match is the newest
		switch {
		case ref.Pinned():
			if t.Digest == ref.Digest {
				pick = t
			}
		case t.State == store.TemplateReady:
			pick = t
		}
	}
	if pick == nil && !ref.Pinned() && len(builds) > 0 {
		pick = builds[len(builds)-1]
	}
	if pick == nil {
		return errdefs.New(errdefs.ErrNotFound, "template %q not found", r.PathValue("name"))
	}
	writeJSON(w, http.StatusOK, toTemplate(pick))
	return nil
}

// deleteTemplate removes every build of a name, or one pinned build (204;
// sandbox.Service.DeleteTemplate decides: 409 while a live sandbox or a
// checkpoint uses it, unless force=true, which a tenant may use only over
// its own sandboxes and checkpoints).
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) error {
	ref, err := templateRef(r)
	if err != nil {
		return err
	}
	force := r.URL.Query().Get("force") == "true"
	ctx := r.Context()
	use, doomed, err := s.svc.DeleteTemplate(ctx, principal(ctx), ref, force)
	if err != nil {
		return err
	}
	s.log(r).Info("template deleted", "template", ref.String(), "builds", len(doomed), "force", force,
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
	op, err := s.svc.GetOperation(r.Context(), principal(r.Context()).TenantID, id)
	if err != nil {
		return notFoundAs(err, "operation", id)
	}
	var params sandbox.BuildParams
	if op.Type != store.OpTemplateBuild || json.Unmarshal(op.Params, &params) != nil || params.Request.Name != name {
		return notFound
	}
	return s.streamBuildLog(w, r, op, after)
}
