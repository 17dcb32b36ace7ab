package store

import "context"

// Role interfaces: the few methods of Store that one consumer needs, so
// that its dependency says what it touches and a test can hand it a small
// fake. Every Store is each of them.

// Accounts is what authentication needs: tenants by name and API keys.
type Accounts interface {
	CreateTenant(ctx context.Context, t *Tenant) error
	GetTenantByName(ctx context.Context, name string) (*Tenant, error)
	CreateAPIKey(ctx context.Context, k *APIKey) error
	GetAPIKeyByHash(ctx context.Context, hash string) (*APIKey, error)
	RevokeAPIKey(ctx context.Context, id string) error
}

// Secrets is a tenant's sealed secrets.
type Secrets interface {
	PutSecret(ctx context.Context, s *Secret) (created bool, err error)
	GetSecret(ctx context.Context, tenantID, name string) (*Secret, error)
	ListSecrets(ctx context.Context, tenantID string) ([]*Secret, error)
	DeleteSecret(ctx context.Context, tenantID, name string) error
}

var (
	_ Accounts = Store(nil)
	_ Secrets  = Store(nil)
)
