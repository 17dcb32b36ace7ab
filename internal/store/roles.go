package store

import "context"

// Role interfaces: the few methods of Store that one consumer needs, so
// that its dependency says what it touches and a test can hand it a small
// fake. Every Store is each of them.

// Accounts is what authentication and the admin's account listing need:
// tenants (by name, listed, with their usage, their quota changed in one
// transaction) and API keys.
type Accounts interface {
	CreateTenant(ctx context.Context, t *Tenant) error
	GetTenantByName(ctx context.Context, name string) (*Tenant, error)
	ListTenants(ctx context.Context) ([]*Tenant, error)
	SandboxUsage(ctx context.Context, tenantID string) (Usage, error)
	CreateAPIKey(ctx context.Context, k *APIKey) error
	GetAPIKeyByHash(ctx context.Context, hash string) (*APIKey, error)
	ListAPIKeys(ctx context.Context, tenantID string) ([]*APIKey, error)
	RevokeAPIKey(ctx context.Context, id string) error
	Atomic(ctx context.Context, fn func(ctx context.Context, tx Store) error) error
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
