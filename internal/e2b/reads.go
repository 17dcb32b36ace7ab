package e2b

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
)

// Sandboxes is what this package calls of the domain (sandbox.Service):
// sandboxes (reads, create, keep, lifecycle and the waits for their
// operations), their files and their command sessions. Each call decides
// what /v1's handler for it decides (validation, tenant scoping, quotas,
// states), so both edges answer alike.
type Sandboxes interface {
	GetSandbox(ctx context.Context, tenant, id string) (*store.Sandbox, error)
	ListSandboxes(ctx context.Context, f store.SandboxFilter) (store.Page[*store.Sandbox], error)
	WorkerOf(sb *store.Sandbox) string
	CreateSandbox(ctx context.Context, p auth.Principal, req sandbox.CreateRequest) (*store.Sandbox, *store.Operation, error)
	Keep(ctx context.Context, sb *store.Sandbox, seconds int) (*store.Sandbox, error)
	SubmitDelete(ctx context.Context, tenant, id string) (*store.Operation, error)
	Suspend(ctx context.Context, sb *store.Sandbox) (*store.Operation, error)
	Wake(ctx context.Context, sb *store.Sandbox) (*store.Operation, error)
	WaitOperation(ctx context.Context, tenant, id string, wait time.Duration) (*store.Operation, error)

	ReadFile(ctx context.Context, sb *store.Sandbox, p string) (io.ReadCloser, agentproto.FileInfo, error)
	WriteFile(ctx context.Context, sb *store.Sandbox, p string, mode uint32, size int64, r io.Reader) (agentproto.FileInfo, error)
	ListDir(ctx context.Context, sb *store.Sandbox, p string) ([]agentproto.FileInfo, error)
	DeleteFile(ctx context.Context, sb *store.Sandbox, p string, recursive bool) error

	Exec(ctx context.Context, sb *store.Sandbox, spec agentproto.ProcessSpec, stdin []byte, outputCap int) (sandbox.ExecResult, error)
	NewCommand(ctx context.Context, sb *store.Sandbox, spec agentproto.ProcessSpec) (*store.Command, error)
	CommandPage(ctx context.Context, sb *store.Sandbox, pr store.PageRequest) (store.Page[*store.Command], error)
	FollowCommand(ctx context.Context, sb *store.Sandbox, c *store.Command, after uint64, heartbeat time.Duration, open func() sandbox.EventSink) error
	Stdin(ctx context.Context, sb *store.Sandbox, c *store.Command, r io.Reader, eof bool) error
	Signal(ctx context.Context, sb *store.Sandbox, c *store.Command, signal string) error
	Resize(ctx context.Context, sb *store.Sandbox, c *store.Command, rows, cols int) error
}

// Authenticator turns a SPACE key into the principal it acts as
// (auth.Authenticator, the one /v1 uses).
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (auth.Principal, error)
}

// caller is who a call acts as: a SPACE key (REST calls, checked as /v1
// checks keys) or a principal this package authenticated (envd calls, by
// the sandbox's access token).
type caller struct {
	key       string
	principal *auth.Principal
}

// principal is who a caller acts as: the principal an envd token stands
// for, or the one its key authenticates as, exactly as /v1 would.
func (h *Handler) principal(ctx context.Context, who caller) (auth.Principal, error) {
	if who.principal != nil {
		return *who.principal, nil
	}
	return h.auth.Authenticate(ctx, who.key)
}

// get reads a sandbox of the caller's tenant from the domain; a deleted
// one is 404, as E2B has no deleted state.
func (h *Handler) get(ctx context.Context, who caller, id string) (apiv1.Sandbox, error) {
	_, sb, err := h.load(ctx, who, id, "get sandbox")
	if err != nil {
		return apiv1.Sandbox{}, err
	}
	out := h.view(sb)
	if gone(out) {
		return out, errorf(http.StatusNotFound, "sandbox %q not found", id)
	}
	return out, nil
}

// load reads sandbox id of the caller's tenant, logging the read as what
// (when not ""); unknown is 404.
func (h *Handler) load(ctx context.Context, who caller, id, what string) (auth.Principal, *store.Sandbox, error) {
	start := time.Now()
	p, err := h.principal(ctx, who)
	if err != nil {
		return p, nil, err
	}
	sb, err := h.sandboxes.GetSandbox(ctx, p.TenantID, id)
	if what != "" {
		h.audit(ctx, what, p, id, start, err)
	}
	if errdefs.ClassOf(err) == errdefs.ErrNotFound {
		return p, nil, errorf(http.StatusNotFound, "sandbox %q not found", id)
	}
	return p, sb, err
}

// listSandboxesOf is a page of the caller's sandboxes f selects (f's tenant is the
// caller's).
func (h *Handler) listSandboxesOf(ctx context.Context, who caller, f store.SandboxFilter) (apiv1.SandboxList, error) {
	start := time.Now()
	p, err := h.principal(ctx, who)
	if err != nil {
		return apiv1.SandboxList{}, err
	}
	f.TenantID = p.TenantID
	f.PageSize = min(f.PageSize, store.MaxPageSize)
	page, err := h.sandboxes.ListSandboxes(ctx, f)
	h.audit(ctx, "list sandboxes", p, "", start, err)
	if err != nil {
		return apiv1.SandboxList{}, err
	}
	out := apiv1.SandboxList{Sandboxes: make([]apiv1.Sandbox, 0, len(page.Items)), NextPageToken: page.NextPageToken}
	for _, sb := range page.Items {
		out.Sandboxes = append(out.Sandboxes, h.view(sb))
	}
	return out, nil
}

// kill submits the delete of the caller's sandbox id.
func (h *Handler) kill(ctx context.Context, who caller, id string) (apiv1.Operation, error) {
	start := time.Now()
	p, err := h.principal(ctx, who)
	if err != nil {
		return apiv1.Operation{}, err
	}
	op, err := h.sandboxes.SubmitDelete(ctx, p.TenantID, id)
	h.audit(ctx, "delete sandbox", p, id, start, err)
	if err != nil {
		return apiv1.Operation{}, err
	}
	return apiv1.Operation{ID: op.ID, Target: op.Target, State: string(op.State)}, nil
}

// transition submits the suspend ("pause") or wake ("resume") of the
// caller's sandbox id.
func (h *Handler) transition(ctx context.Context, who caller, id, what string) (apiv1.Operation, error) {
	start := time.Now()
	p, err := h.principal(ctx, who)
	if err != nil {
		return apiv1.Operation{}, err
	}
	sb, err := h.sandboxes.GetSandbox(ctx, p.TenantID, id)
	if err == nil {
		submit := h.sandboxes.Wake
		if what == "pause" {
			submit = h.sandboxes.Suspend
		}
		var op *store.Operation
		if op, err = submit(ctx, sb); err == nil {
			h.audit(ctx, what+" sandbox", p, id, start, nil)
			return apiv1.Operation{ID: op.ID, Target: op.Target, State: string(op.State)}, nil
		}
	}
	h.audit(ctx, what+" sandbox", p, id, start, err)
	if errdefs.ClassOf(err) == errdefs.ErrNotFound {
		return apiv1.Operation{}, errorf(http.StatusNotFound, "sandbox %q not found", id)
	}
	return apiv1.Operation{}, err
}

// waitOp waits for an operation to end, within cfg.OpWait. A failed
// operation is its error with the status its code maps to.
func (h *Handler) waitOp(ctx context.Context, who caller, op apiv1.Operation, what string) error {
	p, err := h.principal(ctx, who)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(h.cfg.OpWait)
	for !opDone(op.State) {
		left := time.Until(deadline)
		if left <= 0 {
			return errorf(http.StatusGatewayTimeout, "%s of %s did not finish within %s; it goes on (operation %s)", what, op.Target, h.cfg.OpWait, op.ID)
		}
		cur, err := h.sandboxes.WaitOperation(ctx, p.TenantID, op.ID, min(left, 30*time.Second))
		if err != nil {
			return err
		}
		op.State = string(cur.State)
		if cur.Error != nil {
			op.Error = &apiv1.OpError{Code: cur.Error.Code, Message: cur.Error.Message}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if op.State == apiv1.OpSucceeded {
		return nil
	}
	msg := what + " failed"
	code := "internal"
	if op.Error != nil {
		msg, code = what+" failed: "+op.Error.Message, op.Error.Code
	}
	return errorf(statusOfCode(code), "%s", msg)
}

// audit logs a call answered by the domain (tenant, key, result), as
// /v1's access log logs its requests.
func (h *Handler) audit(ctx context.Context, what string, p auth.Principal, id string, start time.Time, err error) {
	code := "ok"
	if err != nil {
		code = errdefs.ClassOf(err).Code()
	}
	h.log.InfoContext(ctx, "e2b", "call", what, "sandbox", id, "tenant", p.TenantID, "key", p.KeyID,
		"result", code, "duration_ms", time.Since(start).Milliseconds())
}

// view is the fields of a sandbox this package answers with.
func (h *Handler) view(sb *store.Sandbox) apiv1.Sandbox {
	out := apiv1.Sandbox{ID: sb.ID, Template: sb.Template, TemplateDigest: sb.TemplateDigest, State: string(sb.State),
		VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB, DiskMiB: sb.DiskMiB, Metadata: sb.Metadata,
		Worker: h.sandboxes.WorkerOf(sb), CreatedAt: sb.CreatedAt.UTC()}
	if sb.ExpiresAt != nil {
		t := sb.ExpiresAt.UTC()
		out.ExpiresAt = &t
	}
	return out
}

// domainError is err's class and public message, when err is the
// domain's (not one of this package's).
func domainError(err error) (status int, message string, ok bool) {
	var pe *publicError
	var re *rpcError
	if errors.As(err, &pe) || errors.As(err, &re) {
		return 0, "", false
	}
	c, msg, _ := errdefs.Render(err)
	if c == errdefs.ErrInternal {
		return 0, "", false
	}
	return statusOfCode(c.Code()), msg, true
}
