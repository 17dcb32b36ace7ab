package client

import (
	"context"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// Page selects a page of a listing.
type Page struct {
	Size  int
	Token string
}

func (p Page) values(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if p.Size > 0 {
		q.Set("page_size", strconv.Itoa(p.Size))
	}
	if p.Token != "" {
		q.Set("page_token", p.Token)
	}
	return q
}

// GetOperation reads an operation; a positive wait long-polls until it is
// done or wait passes (the server caps it).
func (c *Client) GetOperation(ctx context.Context, id string, wait time.Duration) (*apiv1.Operation, error) {
	var q url.Values
	if wait > 0 {
		q = url.Values{"wait": {wait.String()}}
	}
	var op apiv1.Operation
	return &op, c.do(ctx, "GET", "/v1/operations/"+esc(id), q, nil, &op)
}

// WaitOperation long-polls until the operation is done or ctx ends.
func (c *Client) WaitOperation(ctx context.Context, id string) (*apiv1.Operation, error) {
	for {
		op, err := c.GetOperation(ctx, id, 30*time.Second)
		if err != nil || op.Done() {
			return op, err
		}
	}
}

// ListOperations lists operations, newest first; target may be empty.
func (c *Client) ListOperations(ctx context.Context, target string, p Page) (*apiv1.OperationList, error) {
	q := url.Values{}
	if target != "" {
		q.Set("target", target)
	}
	var out apiv1.OperationList
	return &out, c.do(ctx, "GET", "/v1/operations", p.values(q), nil, &out)
}

// CancelOperation asks for an operation to be cancelled.
func (c *Client) CancelOperation(ctx context.Context, id string, opts ...CallOption) (*apiv1.Operation, error) {
	var op apiv1.Operation
	return &op, c.do(ctx, "POST", "/v1/operations/"+esc(id)+"/cancel", nil, nil, &op, opts...)
}

// CreateSandbox starts creating a sandbox.
func (c *Client) CreateSandbox(ctx context.Context, req apiv1.CreateSandboxRequest, opts ...CallOption) (*apiv1.SandboxAndOperation, error) {
	var out apiv1.SandboxAndOperation
	return &out, c.do(ctx, "POST", "/v1/sandboxes", nil, req, &out, opts...)
}

// SandboxFilter selects sandboxes in ListSandboxes.
type SandboxFilter struct {
	State    string            // comma-separated states
	Metadata map[string]string // exact matches
	Page
}

// ListSandboxes lists sandboxes.
func (c *Client) ListSandboxes(ctx context.Context, f SandboxFilter) (*apiv1.SandboxList, error) {
	q := url.Values{}
	if f.State != "" {
		q.Set("state", f.State)
	}
	for k, v := range f.Metadata {
		q.Set("metadata."+k, v)
	}
	var out apiv1.SandboxList
	return &out, c.do(ctx, "GET", "/v1/sandboxes", f.Page.values(q), nil, &out)
}

// GetSandbox reads a sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (*apiv1.Sandbox, error) {
	var out apiv1.Sandbox
	return &out, c.do(ctx, "GET", "/v1/sandboxes/"+esc(id), nil, nil, &out)
}

// DeleteSandbox starts deleting a sandbox.
func (c *Client) DeleteSandbox(ctx context.Context, id string) (*apiv1.Operation, error) {
	var out apiv1.OperationResponse
	return &out.Operation, c.do(ctx, "DELETE", "/v1/sandboxes/"+esc(id), nil, nil, &out)
}

func (c *Client) lifecycle(ctx context.Context, id, verb string, opts []CallOption) (*apiv1.Operation, error) {
	var out apiv1.OperationResponse
	return &out.Operation, c.do(ctx, "POST", "/v1/sandboxes/"+esc(id)+"/"+verb, nil, nil, &out, opts...)
}

// PauseSandbox starts pausing a sandbox.
func (c *Client) PauseSandbox(ctx context.Context, id string, opts ...CallOption) (*apiv1.Operation, error) {
	return c.lifecycle(ctx, id, "pause", opts)
}

// SuspendSandbox starts suspending a sandbox.
func (c *Client) SuspendSandbox(ctx context.Context, id string, opts ...CallOption) (*apiv1.Operation, error) {
	return c.lifecycle(ctx, id, "suspend", opts)
}

// WakeSandbox starts waking a sandbox.
func (c *Client) WakeSandbox(ctx context.Context, id string, opts ...CallOption) (*apiv1.Operation, error) {
	return c.lifecycle(ctx, id, "wake", opts)
}

// KeepSandbox sets the sandbox's time to live to seconds from now.
func (c *Client) KeepSandbox(ctx context.Context, id string, seconds int, opts ...CallOption) (*apiv1.Sandbox, error) {
	var out apiv1.Sandbox
	return &out, c.do(ctx, "POST", "/v1/sandboxes/"+esc(id)+"/keep", nil, apiv1.KeepRequest{TimeoutSeconds: seconds}, &out, opts...)
}

// Features lists the server's feature gates.
func (c *Client) Features(ctx context.Context) (*apiv1.FeatureList, error) {
	var out apiv1.FeatureList
	return &out, c.do(ctx, "GET", "/v1/features", nil, nil, &out)
}

// Templates lists templates.
func (c *Client) Templates(ctx context.Context) (*apiv1.TemplateList, error) {
	var out apiv1.TemplateList
	return &out, c.do(ctx, "GET", "/v1/templates", nil, nil, &out)
}

// CreateTenant creates a tenant (admin).
func (c *Client) CreateTenant(ctx context.Context, name string, opts ...CallOption) (*apiv1.Tenant, error) {
	var out apiv1.TenantResponse
	return &out.Tenant, c.do(ctx, "POST", "/v1/admin/tenants", nil, apiv1.CreateTenantRequest{Name: name}, &out, opts...)
}

// CreateKey creates an API key for a tenant (admin); the key is in the answer only.
func (c *Client) CreateKey(ctx context.Context, tenant string, admin bool, opts ...CallOption) (*apiv1.KeyResponse, error) {
	var out apiv1.KeyResponse
	return &out, c.do(ctx, "POST", "/v1/admin/tenants/"+esc(tenant)+"/keys", nil, apiv1.CreateKeyRequest{Admin: admin}, &out, opts...)
}

// DeleteKey revokes an API key (admin).
func (c *Client) DeleteKey(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/v1/admin/keys/"+esc(id), nil, nil, nil)
}

// Workers lists workers (admin).
func (c *Client) Workers(ctx context.Context) (*apiv1.WorkerList, error) {
	var out apiv1.WorkerList
	return &out, c.do(ctx, "GET", "/v1/admin/workers", nil, nil, &out)
}

// PutFile writes r to path in the sandbox; mode 0 means 0644.
func (c *Client) PutFile(ctx context.Context, sandbox, path string, mode uint32, r io.Reader) (*apiv1.FileInfo, error) {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", "0"+strconv.FormatUint(uint64(mode), 8))
	}
	var out apiv1.FileInfo
	return &out, c.do(ctx, "PUT", "/v1/sandboxes/"+esc(sandbox)+"/files", q, r, &out)
}

// PutTar unpacks a tar stream into the directory dir in the sandbox.
func (c *Client) PutTar(ctx context.Context, sandbox, dir string, r io.Reader) error {
	q := url.Values{"path": {dir}, "format": {"tar"}}
	return c.do(ctx, "PUT", "/v1/sandboxes/"+esc(sandbox)+"/files", q, r, nil, WithHeader("Content-Type", "application/x-tar"))
}

// GetFile reads a file of the sandbox; close the reader.
func (c *Client) GetFile(ctx context.Context, sandbox, path string) (io.ReadCloser, error) {
	resp, err := c.stream(ctx, "GET", "/v1/sandboxes/"+esc(sandbox)+"/files", url.Values{"path": {path}}, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// GetTar reads a directory of the sandbox as a tar stream; close the reader.
func (c *Client) GetTar(ctx context.Context, sandbox, dir string) (io.ReadCloser, error) {
	resp, err := c.stream(ctx, "GET", "/v1/sandboxes/"+esc(sandbox)+"/files", url.Values{"path": {dir}, "format": {"tar"}}, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ListFiles lists a directory of the sandbox.
func (c *Client) ListFiles(ctx context.Context, sandbox, dir string) ([]apiv1.FileInfo, error) {
	var out []apiv1.FileInfo
	return out, c.do(ctx, "GET", "/v1/sandboxes/"+esc(sandbox)+"/files/list", url.Values{"path": {dir}}, nil, &out)
}

// DeleteFile deletes a path of the sandbox.
func (c *Client) DeleteFile(ctx context.Context, sandbox, path string, recursive bool) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.do(ctx, "DELETE", "/v1/sandboxes/"+esc(sandbox)+"/files", q, nil, nil)
}
