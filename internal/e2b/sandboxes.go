package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/template"
)

// createRequest is the body of POST /sandboxes and /v2/sandboxes. Fields
// SPACE does not use are ignored, as E2B ignores unknown ones.
type createRequest struct {
	TemplateID          string            `json:"templateID"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Timeout             *int              `json:"timeout"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	AutoPause           *bool             `json:"autoPause"`
}

// sandboxResponse answers create and connect.
type sandboxResponse struct {
	SandboxID       string  `json:"sandboxID"`
	TemplateID      string  `json:"templateID"`
	Alias           string  `json:"alias,omitempty"`
	ClientID        string  `json:"clientID"`
	EnvdVersion     string  `json:"envdVersion"`
	EnvdAccessToken string  `json:"envdAccessToken"`
	Domain          *string `json:"domain"`
	portAccess
}

// sandboxDetail is GET /sandboxes/{id} and an item of the listings.
type sandboxDetail struct {
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	EnvdVersion string            `json:"envdVersion"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	State       string            `json:"state"`
	Metadata    map[string]string `json:"metadata"`
}

// clientID stands in for E2B's legacy client id: the worker, or "space".
func clientID(sb apiv1.Sandbox) string {
	if sb.Worker != "" {
		return sb.Worker
	}
	return "space"
}

// e2bState maps SPACE's states to E2B's two: E2B's paused is SPACE's
// suspended (and a vCPU-paused sandbox is not running either).
func e2bState(s string) string {
	switch s {
	case apiv1.SandboxSuspending, apiv1.SandboxSuspended, apiv1.SandboxPaused, apiv1.SandboxFailed:
		return "paused"
	}
	return "running"
}

// spaceStates are the SPACE states an E2B state filter selects.
func spaceStates(e2b string) []string {
	switch e2b {
	case "running":
		return []string{apiv1.SandboxCreating, apiv1.SandboxRunning, apiv1.SandboxPausing, apiv1.SandboxWaking}
	case "paused":
		return []string{apiv1.SandboxPaused, apiv1.SandboxSuspending, apiv1.SandboxSuspended, apiv1.SandboxFailed}
	}
	return nil
}

func gone(sb apiv1.Sandbox) bool {
	return sb.State == apiv1.SandboxDeleted || sb.State == apiv1.SandboxDeleting
}

func toDetail(sb apiv1.Sandbox) sandboxDetail {
	end := sb.CreatedAt
	if sb.ExpiresAt != nil {
		end = *sb.ExpiresAt
	}
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return sandboxDetail{
		TemplateID: sb.Template, Alias: sb.Template, SandboxID: sb.ID, ClientID: clientID(sb),
		StartedAt: sb.CreatedAt, EndAt: end, EnvdVersion: EnvdVersion,
		CPUCount: sb.VCPUs, MemoryMB: sb.MemoryMiB, DiskSizeMB: sb.DiskMiB,
		State: e2bState(sb.State), Metadata: md,
	}
}

// newEnvdToken makes a sandbox's envd access token and stores its hash.
func (h *Handler) newEnvdToken(ctx context.Context, sb *store.Sandbox) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(b[:])
	err := h.tokens.CreateEnvdToken(ctx, &store.EnvdToken{SandboxID: sb.ID, TenantID: sb.TenantID, Hash: auth.HashKey(tok)})
	return tok, err
}

func (h *Handler) createSandbox(w http.ResponseWriter, r *http.Request, who caller) {
	var req createRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		writeRESTError(w, http.StatusBadRequest, "request body is not valid JSON")
		return
	}
	if req.AutoPause != nil && *req.AutoPause {
		writeRESTError(w, http.StatusNotImplemented, "autoPause is not supported: a SPACE sandbox is deleted when its timeout ends")
		return
	}
	in := sandbox.CreateRequest{Env: req.EnvVars, Metadata: req.Metadata}
	if req.TemplateID == "" {
		req.TemplateID = "base"
	}
	ref, err := template.Parse(req.TemplateID)
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, "templateID must be a template name (^[a-z0-9][a-z0-9-]{0,62}$), optionally followed by @sha256:<64 hex digits>")
		return
	}
	in.Template = ref
	if req.Timeout != nil {
		in.TimeoutSeconds = *req.Timeout
	}
	if req.AllowInternetAccess != nil && *req.AllowInternetAccess {
		if h.cfg.RefuseInternet {
			writeRESTError(w, http.StatusForbidden, "internet access is disabled on this deployment: create the sandbox with allowInternetAccess: false")
			return
		}
		// Egress default allow; the platform's guards (host, metadata,
		// other sandboxes) hold whatever the policy says.
		in.Network = json.RawMessage(`{"egress":{"default":"allow"}}`)
	}
	ctx := r.Context()
	start := time.Now()
	p, err := h.principal(ctx, who)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	sb, op, err := h.sandboxes.CreateSandbox(ctx, p, in)
	id := ""
	if sb != nil {
		id = sb.ID
	}
	h.audit(ctx, "create sandbox", p, id, start, err)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	tok, err := h.newEnvdToken(ctx, sb)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if err := h.waitOp(ctx, who, apiv1.Operation{ID: op.ID, Target: op.Target, State: string(op.State)}, "create"); err != nil {
		h.writeErr(w, r, err)
		return
	}
	traffic, domain, err := h.portFields(r, p.TenantID, sb.ID)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	view := h.view(sb)
	writeJSON(w, http.StatusCreated, sandboxResponse{
		SandboxID: sb.ID, TemplateID: view.Template, Alias: view.Template,
		ClientID: clientID(view), EnvdVersion: EnvdVersion, EnvdAccessToken: tok,
		Domain: domain, portAccess: portAccess{TrafficAccessToken: traffic},
	})
}

func (h *Handler) getSandbox(w http.ResponseWriter, r *http.Request, who caller) {
	sb, err := h.get(r.Context(), who, r.PathValue("id"))
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toDetail(sb))
}

func (h *Handler) listSandboxes(w http.ResponseWriter, r *http.Request, who caller) {
	in := r.URL.Query()
	var f store.SandboxFilter
	if md := in.Get("metadata"); md != "" {
		kv, err := url.ParseQuery(md)
		if err != nil {
			writeRESTError(w, http.StatusBadRequest, "metadata must be a URL-encoded key=value&… string")
			return
		}
		f.Metadata = map[string]string{}
		for k, v := range kv {
			f.Metadata[k] = v[len(v)-1]
		}
	}
	var states []string
	for _, v := range in["state"] {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			st := spaceStates(s)
			if st == nil {
				writeRESTError(w, http.StatusBadRequest, "unknown state %q (running or paused)", s)
				return
			}
			states = append(states, st...)
		}
	}
	switch {
	case len(states) > 0:
	case r.URL.Path == "/sandboxes":
		// E2B's older listing shows running sandboxes only.
		states = spaceStates("running")
	default:
		states = append(spaceStates("running"), spaceStates("paused")...)
	}
	for _, st := range states {
		f.States = append(f.States, store.SandboxState(st))
	}
	if l := in.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			writeRESTError(w, http.StatusBadRequest, "limit must be a positive integer")
			return
		}
		f.PageSize = n
	}
	f.PageToken = in.Get("nextToken")
	list, err := h.listSandboxesOf(r.Context(), who, f)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	out := make([]sandboxDetail, 0, len(list.Sandboxes))
	for _, sb := range list.Sandboxes {
		out = append(out, toDetail(sb))
	}
	if list.NextPageToken != "" {
		w.Header().Set("X-Next-Token", list.NextPageToken)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) killSandbox(w http.ResponseWriter, r *http.Request, who caller) {
	id := r.PathValue("id")
	if _, err := h.get(r.Context(), who, id); err != nil {
		h.writeErr(w, r, err)
		return
	}
	op, err := h.kill(r.Context(), who, id)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if err := h.waitOp(r.Context(), who, op, "kill"); err != nil {
		h.writeErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type timeoutRequest struct {
	Timeout int `json:"timeout"`
}

// keep extends the caller's sandbox id's time to live to seconds from now.
func (h *Handler) keep(ctx context.Context, who caller, id string, seconds int) error {
	start := time.Now()
	p, sb, err := h.load(ctx, who, id, "")
	if err == nil {
		_, err = h.sandboxes.Keep(ctx, sb, seconds)
	}
	h.audit(ctx, "keep sandbox", p, id, start, err)
	return err
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, who caller) {
	var req timeoutRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || req.Timeout < 1 {
		writeRESTError(w, http.StatusBadRequest, "body must be {\"timeout\": seconds} with seconds ≥ 1")
		return
	}
	id := r.PathValue("id")
	if _, err := h.get(r.Context(), who, id); err != nil {
		h.writeErr(w, r, err)
		return
	}
	if err := h.keep(r.Context(), who, id, req.Timeout); err != nil {
		h.writeErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) pauseSandbox(w http.ResponseWriter, r *http.Request, who caller) {
	id := r.PathValue("id")
	sb, err := h.get(r.Context(), who, id)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if e2bState(sb.State) == "paused" {
		writeRESTError(w, http.StatusConflict, "sandbox %q is already paused", id)
		return
	}
	op, err := h.transition(r.Context(), who, id, "pause")
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if err := h.waitOp(r.Context(), who, op, "pause"); err != nil {
		h.writeErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// settle waits while a sandbox is between states.
func (h *Handler) settle(ctx context.Context, who caller, sb apiv1.Sandbox) (apiv1.Sandbox, error) {
	deadline := time.Now().Add(h.cfg.OpWait)
	for {
		switch sb.State {
		case apiv1.SandboxCreating, apiv1.SandboxPausing, apiv1.SandboxSuspending, apiv1.SandboxWaking:
		default:
			return sb, nil
		}
		if time.Now().After(deadline) {
			return sb, errorf(http.StatusGatewayTimeout, "sandbox %q is still %s", sb.ID, sb.State)
		}
		select {
		case <-ctx.Done():
			return sb, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		var err error
		if sb, err = h.get(ctx, who, sb.ID); err != nil {
			return sb, err
		}
	}
}

func (h *Handler) connectSandbox(w http.ResponseWriter, r *http.Request, who caller) {
	var req timeoutRequest
	_ = json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req) // the body is optional
	id := r.PathValue("id")
	sb, err := h.get(r.Context(), who, id)
	if err == nil {
		sb, err = h.settle(r.Context(), who, sb)
	}
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	status := http.StatusOK
	if sb.State != apiv1.SandboxRunning {
		op, err := h.transition(r.Context(), who, id, "resume")
		if err != nil {
			h.writeErr(w, r, err)
			return
		}
		if err := h.waitOp(r.Context(), who, op, "resume"); err != nil {
			h.writeErr(w, r, err)
			return
		}
		status = http.StatusCreated
	}
	if req.Timeout > 0 {
		if err := h.keep(r.Context(), who, id, req.Timeout); err != nil {
			h.writeErr(w, r, err)
			return
		}
	}
	_, cur, err := h.load(r.Context(), who, id, "")
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	tok, err := h.newEnvdToken(r.Context(), cur)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	p, err := h.principal(r.Context(), who)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	traffic, domain, err := h.portFields(r, p.TenantID, id)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	writeJSON(w, status, sandboxResponse{
		SandboxID: sb.ID, TemplateID: sb.Template, Alias: sb.Template, ClientID: clientID(sb),
		EnvdVersion: EnvdVersion, EnvdAccessToken: tok, Domain: domain,
		portAccess: portAccess{TrafficAccessToken: traffic},
	})
}
