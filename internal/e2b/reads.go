package e2b

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// Sandboxes is what this package reads of the domain (sandbox.Service):
// sandboxes by id and by filter, and the worker a sandbox is on.
type Sandboxes interface {
	GetSandbox(ctx context.Context, tenant, id string) (*store.Sandbox, error)
	ListSandboxes(ctx context.Context, f store.SandboxFilter) (store.Page[*store.Sandbox], error)
	WorkerOf(sb *store.Sandbox) string
	SubmitDelete(ctx context.Context, tenant, id string) (*store.Operation, error)
	Suspend(ctx context.Context, sb *store.Sandbox) (*store.Operation, error)
	Wake(ctx context.Context, sb *store.Sandbox) (*store.Operation, error)
	WaitOperation(ctx context.Context, tenant, id string, wait time.Duration) (*store.Operation, error)
}

// Authenticator turns a SPACE key into the principal it acts as
// (auth.Authenticator, the one /v1 uses).
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (auth.Principal, error)
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
	start := time.Now()
	p, err := h.principal(ctx, who)
	if err != nil {
		return apiv1.Sandbox{}, err
	}
	sb, err := h.sandboxes.GetSandbox(ctx, p.TenantID, id)
	h.audit(ctx, "get sandbox", p, id, start, err)
	if errdefs.ClassOf(err) == errdefs.ErrNotFound {
		return apiv1.Sandbox{}, errorf(http.StatusNotFound, "sandbox %q not found", id)
	}
	if err != nil {
		return apiv1.Sandbox{}, err
	}
	out := h.view(sb)
	if gone(out) {
		return out, errorf(http.StatusNotFound, "sandbox %q not found", id)
	}
	return out, nil
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

// audit logs a read answered from the domain as /v1's access log would
// have logged the in-process request.
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
// domain's (not one of /v1's answers or of this package).
func domainError(err error) (status int, message string, ok bool) {
	var ve *v1Error
	var pe *publicError
	if errors.As(err, &ve) || errors.As(err, &pe) {
		return 0, "", false
	}
	c, msg, _ := errdefs.Render(err)
	if c == errdefs.ErrInternal {
		return 0, "", false
	}
	return statusOfCode(c.Code()), msg, true
}
