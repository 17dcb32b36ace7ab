package client

import (
	"context"
	"encoding/json"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// Version asks which build the server is (no key needed).
func (c *Client) Version(ctx context.Context) (*apiv1.Version, error) {
	var out apiv1.Version
	return &out, c.do(ctx, "GET", "/v1/version", nil, nil, &out)
}

// CreateKeyFormat creates an API key for a tenant (admin) in a format:
// "space" (the default, also for "") or "e2b" (e2b_<hex>, the form E2B's
// SDKs accept). The key is in the answer only.
func (c *Client) CreateKeyFormat(ctx context.Context, tenant string, admin bool, format string, opts ...CallOption) (*apiv1.KeyResponse, error) {
	var out apiv1.KeyResponse
	return &out, c.do(ctx, "POST", "/v1/admin/tenants/"+esc(tenant)+"/keys", nil,
		apiv1.CreateKeyRequest{Admin: admin, Format: format}, &out, opts...)
}

// SetNetwork replaces a sandbox's egress policy (the network object of
// the API: {egress: {default, allow, deny}, inject: [...]}).
func (c *Client) SetNetwork(ctx context.Context, sandbox string, policy json.RawMessage) (*apiv1.Sandbox, error) {
	var out apiv1.Sandbox
	return &out, c.do(ctx, "PUT", "/v1/sandboxes/"+esc(sandbox)+"/network", nil, policy, &out)
}

// NetworkLog returns a sandbox's egress audit records (incubating: the
// server's feature network_log).
func (c *Client) NetworkLog(ctx context.Context, sandbox string) (*apiv1.NetworkLog, error) {
	var out apiv1.NetworkLog
	return &out, c.do(ctx, "GET", "/v1/sandboxes/"+esc(sandbox)+"/network/log", nil, nil, &out)
}

// PutSecret stores a secret's value; no route returns it again.
func (c *Client) PutSecret(ctx context.Context, name, value string) (*apiv1.Secret, error) {
	var out apiv1.Secret
	return &out, c.do(ctx, "PUT", "/v1/secrets/"+esc(name), nil, apiv1.PutSecretRequest{Value: value}, &out)
}

// ListSecrets lists the tenant's secrets: names and timestamps.
func (c *Client) ListSecrets(ctx context.Context, p Page) (*apiv1.SecretList, error) {
	var out apiv1.SecretList
	return &out, c.do(ctx, "GET", "/v1/secrets", p.values(nil), nil, &out)
}

// DeleteSecret deletes a secret.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/v1/secrets/"+esc(name), nil, nil, nil)
}

// Tenants lists every tenant with its quotas and live sandbox count (admin).
func (c *Client) Tenants(ctx context.Context) (*apiv1.TenantList, error) {
	var out apiv1.TenantList
	return &out, c.do(ctx, "GET", "/v1/admin/tenants", nil, nil, &out)
}

// Keys lists a tenant's API keys, revoked ones included (admin): ids and
// formats, never a key.
func (c *Client) Keys(ctx context.Context, tenant string) (*apiv1.KeyList, error) {
	var out apiv1.KeyList
	return &out, c.do(ctx, "GET", "/v1/admin/tenants/"+esc(tenant)+"/keys", nil, nil, &out)
}

// SetQuotas sets the quotas req gives of a tenant (admin); the others stay.
func (c *Client) SetQuotas(ctx context.Context, tenant string, req apiv1.SetQuotasRequest) (*apiv1.TenantInfo, error) {
	var out apiv1.TenantInfoResponse
	return &out.Tenant, c.do(ctx, "PUT", "/v1/admin/tenants/"+esc(tenant)+"/quotas", nil, req, &out)
}
