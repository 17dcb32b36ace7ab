package api

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
)

// The bounds the OpenAPI document states are the domain's.
const (
	maxMetadata       = sandbox.MaxMetadata
	maxMetadataValue  = sandbox.MaxMetadataValue
	maxEnv            = sandbox.MaxEnv
	maxEnvValue       = sandbox.MaxEnvValue
	maxTimeoutSeconds = sandbox.MaxTimeoutSeconds
)

// validateCreate parses the template reference of a create or branch
// request into in (with its sizes): the edge's part of the validation. The
// Service checks the rest when it creates; a reference that does not parse
// is answered here, with the Service's findings on the rest, in one 400.
func (s *Server) validateCreate(req *apiv1.CreateSandboxRequest, in *sandbox.CreateRequest) error {
	f := map[string]string{}
	if req.Template == "" {
		f["template"] = "required"
	} else if ref, err := template.Parse(req.Template); err != nil {
		f["template"] = "must be a template name (^[a-z0-9][a-z0-9-]{0,62}$), optionally followed by @sha256:<64 hex digits>"
	} else {
		in.Template = ref
	}
	in.Size = sandbox.Size{VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB, DiskMiB: req.DiskMiB}
	if len(f) == 0 {
		return nil
	}
	return s.svc.ValidateCreate(in, f)
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.CreateSandboxRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if req.FromCheckpoint != "" {
		return s.createBranch(w, r, &req)
	}
	in := createRequest(&req)
	if err := s.validateCreate(&req, &in); err != nil {
		return err
	}
	ctx := r.Context()
	sb, op, err := s.svc.CreateSandbox(ctx, principal(ctx), in)
	if err != nil {
		return err
	}
	s.log(r).Info("sandbox create submitted", "sandbox", sb.ID, "op", op.ID, "template", req.Template)
	writeJSON(w, http.StatusAccepted, apiv1.SandboxAndOperation{Sandbox: s.sandboxView(sb), Operation: toOperation(op)})
	return nil
}

// createRequest is the domain's form of a create request, but for its
// template and sizes, which differ between a create and a branch.
func createRequest(req *apiv1.CreateSandboxRequest) sandbox.CreateRequest {
	return sandbox.CreateRequest{Env: req.Env, Metadata: req.Metadata, Network: req.Network,
		TimeoutSeconds: req.TimeoutSeconds, IdleTimeoutSeconds: req.IdleTimeoutSeconds}
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	pr, err := pageRequest(r)
	if err != nil {
		return err
	}
	f := store.SandboxFilter{TenantID: principal(r.Context()).TenantID, PageRequest: pr}
	bad := map[string]string{}
	for key, vals := range r.URL.Query() {
		switch {
		case key == "state":
			for _, v := range vals {
				for _, st := range strings.Split(v, ",") {
					if !sandbox.Known(st) {
						bad["state"] = "unknown state " + fmt.Sprintf("%q", st)
						continue
					}
					f.States = append(f.States, store.SandboxState(st))
				}
			}
		case strings.HasPrefix(key, "metadata."):
			if f.Metadata == nil {
				f.Metadata = map[string]string{}
			}
			f.Metadata[strings.TrimPrefix(key, "metadata.")] = vals[len(vals)-1]
		case key == "page_size" || key == "page_token":
		default:
			bad[key] = "unknown query parameter"
		}
	}
	if len(bad) > 0 {
		return invalid(bad)
	}
	if len(f.States) == 0 {
		// Deleted sandboxes are listed only when asked for by state.
		f.ExcludeStates = sandbox.Gone()
	}
	page, err := s.svc.ListSandboxes(r.Context(), f)
	if err != nil {
		return err
	}
	out := apiv1.SandboxList{Sandboxes: []apiv1.Sandbox{}, NextPageToken: page.NextPageToken}
	for _, sb := range page.Items {
		out.Sandboxes = append(out.Sandboxes, s.sandboxView(sb))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// sandbox loads the caller's sandbox named in the path.
func (s *Server) sandbox(r *http.Request) (*store.Sandbox, error) {
	id := r.PathValue("id")
	if !validID(id, store.PrefixSandbox) {
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
	}
	sb, err := s.svc.GetSandbox(r.Context(), principal(r.Context()).TenantID, id)
	if err != nil {
		return nil, notFoundAs(err, "sandbox", id)
	}
	return sb, nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.withUsage(r.Context(), sb))
	return nil
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	op, err := s.svc.SubmitDelete(r.Context(), sb.TenantID, sb.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, apiv1.OperationResponse{Operation: toOperation(op)})
	return nil
}

func (s *Server) keepSandbox(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.KeepRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if err := sandbox.ValidKeep(req.TimeoutSeconds); err != nil { // 400 before an unknown sandbox's 404
		return err
	}
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	sb, err = s.svc.Keep(r.Context(), sb, req.TimeoutSeconds)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.sandboxView(sb))
	return nil
}
