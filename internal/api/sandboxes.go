package api

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
)

var (
	metadataKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}$`)
	envKeyRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,255}$`)
)

const (
	maxMetadata       = 64
	maxMetadataValue  = 256
	maxEnv            = 256
	maxEnvValue       = 32 << 10
	maxTimeoutSeconds = 30 * 24 * 3600
)

// validateEnv checks environment variable names and sizes into fields.
func validateEnv(env map[string]string, fields map[string]string) {
	if len(env) > maxEnv {
		fields["env"] = fmt.Sprintf("at most %d variables", maxEnv)
	}
	for k, v := range env {
		if !envKeyRE.MatchString(k) {
			fields["env."+k] = "must be a name of letters, digits and _ not starting with a digit"
		} else if len(v) > maxEnvValue || strings.ContainsRune(v, 0) {
			fields["env."+k] = "value too long or holds a NUL byte"
		}
	}
}

func (s *Server) validateCreate(req *apiv1.CreateSandboxRequest) error {
	f := map[string]string{}
	if req.Template == "" {
		f["template"] = "required"
	} else if _, err := template.Parse(req.Template); err != nil {
		f["template"] = "must be a template name (^[a-z0-9][a-z0-9-]{0,62}$), optionally followed by @sha256:<64 hex digits>"
	}
	if req.VCPUs < 0 || req.VCPUs > s.cfg.MaxVCPUs {
		f["vcpus"] = fmt.Sprintf("must be between 1 and %d", s.cfg.MaxVCPUs)
	}
	if req.MemoryMiB != 0 && (req.MemoryMiB < 128 || req.MemoryMiB > s.cfg.MaxMemoryMiB) {
		f["memory_mib"] = fmt.Sprintf("must be between 128 and %d", s.cfg.MaxMemoryMiB)
	}
	if req.DiskMiB != 0 && (req.DiskMiB < 64 || req.DiskMiB > s.cfg.MaxDiskMiB) {
		f["disk_mib"] = fmt.Sprintf("must be between 64 and %d", s.cfg.MaxDiskMiB)
	}
	validateEnv(req.Env, f)
	if len(req.Metadata) > maxMetadata {
		f["metadata"] = fmt.Sprintf("at most %d entries", maxMetadata)
	}
	for k, v := range req.Metadata {
		if !metadataKeyRE.MatchString(k) {
			f["metadata."+k] = "keys are 1-63 characters of letters, digits and _ . - /"
		} else if len(v) > maxMetadataValue {
			f["metadata."+k] = fmt.Sprintf("values are at most %d bytes", maxMetadataValue)
		}
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > maxTimeoutSeconds {
		f["timeout_seconds"] = fmt.Sprintf("must be between 0 and %d", maxTimeoutSeconds)
	}
	if req.IdleTimeoutSeconds < 0 || req.IdleTimeoutSeconds > maxTimeoutSeconds {
		f["idle_timeout_seconds"] = fmt.Sprintf("must be between 0 and %d", maxTimeoutSeconds)
	}
	req.Network = policyFields(req.Network, f)
	if len(f) > 0 {
		return invalid(f)
	}
	return nil
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var req apiv1.CreateSandboxRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if req.FromCheckpoint != "" {
		return s.createBranch(w, r, &req)
	}
	if err := s.validateCreate(&req); err != nil {
		return err
	}
	ref, _ := template.Parse(req.Template) // validateCreate checked it
	in := createRequest(&req)
	in.Template = ref
	in.Size = sandbox.Size{VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB, DiskMiB: req.DiskMiB}
	ctx := r.Context()
	sb, op, err := s.svc.CreateSandbox(ctx, principal(ctx), in)
	if err != nil {
		return err
	}
	s.log(r).Info("sandbox create submitted", "sandbox", sb.ID, "op", op.ID, "template", req.Template)
	writeJSON(w, http.StatusAccepted, apiv1.SandboxAndOperation{Sandbox: s.sandboxView(sb), Operation: toOperation(op)})
	return nil
}

// createRequest is the domain's form of a validated create request, but
// for its template and sizes, which differ between a create and a branch.
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
	if req.TimeoutSeconds <= 0 || req.TimeoutSeconds > maxTimeoutSeconds {
		return invalid(map[string]string{"timeout_seconds": fmt.Sprintf("must be between 1 and %d", maxTimeoutSeconds)})
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
