// Package store is the control plane's persistence contract: the model types
// (tenants, API keys, sandboxes, operations, command sessions, idempotency
// records, templates, sealed secrets, checkpoints) and the Store interface every backend implements
// (store/sqlite for a single node; store/postgres for a cluster). The conformance
// suite in store/storetest pins the behaviour down.
//
// The store knows nothing of HTTP, workers or VMs. It enforces what must hold
// under concurrency: tenant scoping, compare-and-set on states, quotas at
// creation, put-if-absent idempotency.
//
// Errors wrap errdefs classes: ErrNotFound for an unknown id or another
// tenant's id (never a hint which), ErrConflict for a failed compare-and-set
// or a duplicate, ErrResourceExhausted for a quota. A state conflict is an
// *errdefs.Public whose Details carry "state" (the current state).
package store

import (
	"context"
	"time"
)

// AnyTenant, passed as a tenant id, disables tenant scoping. Only the control
// plane's own machinery (operation handlers, reconciliation, admin routes)
// uses it; request handlers always pass the principal's tenant.
const AnyTenant = ""

// Store is the control plane's persistent state.
//
// A Store is safe for concurrent use. Atomic runs fn in one transaction: the
// Store passed to fn is bound to that transaction (use it, not the outer one,
// inside fn), and every change fn makes commits together or not at all. A
// nested Atomic on the transaction's Store joins the same transaction.
type Store interface {
	Atomic(ctx context.Context, fn func(ctx context.Context, tx Store) error) error
	Close() error

	// Tenants. Names are unique (ErrConflict).
	CreateTenant(ctx context.Context, t *Tenant) error
	GetTenant(ctx context.Context, id string) (*Tenant, error)
	GetTenantByName(ctx context.Context, name string) (*Tenant, error)
	ListTenants(ctx context.Context) ([]*Tenant, error)
	SetTenantQuota(ctx context.Context, id string, q Quota) error

	// API keys. GetAPIKeyByHash returns revoked keys too (RevokedAt set);
	// the caller decides. RevokeAPIKey is idempotent.
	CreateAPIKey(ctx context.Context, k *APIKey) error
	GetAPIKeyByHash(ctx context.Context, hash string) (*APIKey, error)
	RevokeAPIKey(ctx context.Context, id string) error
	ListAPIKeys(ctx context.Context, tenantID string) ([]*APIKey, error)

	// Sandboxes.
	//
	// CreateSandbox inserts sb after checking the tenant's quota in the same
	// transaction (ErrResourceExhausted with details when it does not fit).
	// Call it inside Atomic together with the operation that builds it.
	CreateSandbox(ctx context.Context, sb *Sandbox) error
	GetSandbox(ctx context.Context, tenantID, id string) (*Sandbox, error)
	ListSandboxes(ctx context.Context, f SandboxFilter) (Page[*Sandbox], error)
	// TransitionSandbox is the only way to change a sandbox. It moves the
	// sandbox from one of the states in from (nil: any state) to state to
	// (empty: keep the state), applying mutate (may be nil) to the record
	// first; mutate cannot change ID, TenantID or CreatedAt. A sandbox in
	// another state gets ErrConflict with details {"state": current}. It
	// returns the updated record. UpdatedAt is set by the store.
	TransitionSandbox(ctx context.Context, tenantID, id string, from []SandboxState, to SandboxState, mutate func(*Sandbox) error) (*Sandbox, error)
	// SandboxUsage sums the tenant's live sandboxes (SandboxState.Live).
	SandboxUsage(ctx context.Context, tenantID string) (Usage, error)
	// CheckQuota fails with ErrResourceExhausted (details: resource,
	// limit, used, requested) when the tenant's live sandboxes plus extra
	// exceed its quota; a zero field of extra asks for none of it. Run it
	// in the transaction that takes what it checks.
	CheckQuota(ctx context.Context, tenantID string, extra Usage) error

	// Operations. ListOperations is newest first.
	CreateOperation(ctx context.Context, op *Operation) error
	GetOperation(ctx context.Context, tenantID, id string) (*Operation, error)
	ListOperations(ctx context.Context, f OperationFilter) (Page[*Operation], error)
	// TransitionOperation works like TransitionSandbox. Entering a terminal
	// state sets DoneAt.
	TransitionOperation(ctx context.Context, id string, from []OperationState, to OperationState, mutate func(*Operation) error) (*Operation, error)
	// ListUnfinishedOperations returns every operation not in a terminal
	// state, oldest first (for recovery at start-up).
	ListUnfinishedOperations(ctx context.Context) ([]*Operation, error)

	// Operation leases: which control replica (owner) runs an unfinished
	// operation. A lease lasts until a deadline on the store's clock (the
	// database's, so replicas' clocks need not agree) that its owner renews;
	// a replica that dies stops renewing and another claims what it held.
	// A lease is free when there is none or it has expired. TransitionOperation
	// keeps the lease as it is (mutate cannot change it).
	//
	// ClaimOperation gives the operation to owner for ttl when its lease is
	// free or owner's already. ErrConflict when another owner's lease is
	// live or the operation is finished (details {"state": current});
	// ErrNotFound for an unknown id. Of racing claimers exactly one wins.
	ClaimOperation(ctx context.Context, id, owner string, ttl time.Duration) (*Operation, error)
	// RenewOperationLeases extends owner's leases of ids to ttl from now and
	// returns the ids it still holds: unfinished and owner's (an expired
	// lease nobody claimed meanwhile is owner's still). The others are lost.
	RenewOperationLeases(ctx context.Context, owner string, ids []string, ttl time.Duration) ([]string, error)
	// ClaimExpiredOperations claims for owner, for ttl, up to limit
	// unfinished operations whose lease is free, oldest first. Concurrent
	// callers never claim the same operation.
	ClaimExpiredOperations(ctx context.Context, owner string, ttl time.Duration, limit int) ([]*Operation, error)
	// StartOperation moves owner's pending operation id to running, unless
	// another operation on the same target is running: then it changes
	// nothing and returns that one as holder. So the operations of one
	// target run one at a time across every control replica sharing the
	// store; a holder whose replica died stays running until its lease
	// expires and another replica takes it over and ends it. ErrConflict
	// (details {"state": current}) when id is not pending or its lease is
	// not owner's; ErrNotFound for an unknown id. Of racing starters on one
	// target exactly one starts.
	StartOperation(ctx context.Context, id, owner string) (started, holder *Operation, err error)

	// Command sessions. ListCommands is oldest first.
	CreateCommand(ctx context.Context, c *Command) error
	GetCommand(ctx context.Context, tenantID, sandboxID, id string) (*Command, error)
	ListCommands(ctx context.Context, f CommandFilter) (Page[*Command], error)
	// UpdateCommand works like TransitionSandbox with the state set by mutate:
	// the command must be in one of from (nil: any).
	UpdateCommand(ctx context.Context, id string, from []CommandState, mutate func(*Command) error) (*Command, error)

	// Idempotency. PutIdempotencyRecord inserts rec unless (TenantID, Key)
	// exists; it returns the stored record and whether this call inserted it.
	PutIdempotencyRecord(ctx context.Context, rec *IdempotencyRecord) (stored *IdempotencyRecord, inserted bool, err error)
	GetIdempotencyRecord(ctx context.Context, tenantID, key string) (*IdempotencyRecord, error)
	// CompleteIdempotencyRecord stores the answer of the request that
	// inserted the record.
	CompleteIdempotencyRecord(ctx context.Context, tenantID, key string, status int, body []byte) error
	// DeleteIdempotencyRecord forgets a key (a request that failed before
	// acting, so a retry may act). Idempotent.
	DeleteIdempotencyRecord(ctx context.Context, tenantID, key string) error
	// PruneIdempotencyRecords deletes records created before t; it returns
	// how many.
	PruneIdempotencyRecords(ctx context.Context, before time.Time) (int, error)

	// Templates. UpsertTemplate inserts or replaces by ID; (Name, Digest) is
	// unique. GetTemplateByName returns the newest ready build of name, or
	// the exact build when digest is not empty (any state).
	UpsertTemplate(ctx context.Context, t *Template) error
	GetTemplate(ctx context.Context, id string) (*Template, error)
	GetTemplateByName(ctx context.Context, name, digest string) (*Template, error)
	ListTemplates(ctx context.Context) ([]*Template, error)
	DeleteTemplate(ctx context.Context, id string) error

	// Secrets, scoped by tenant and unique by (TenantID, Name). PutSecret
	// inserts or replaces the sealed value (keeping CreatedAt on replace,
	// setting UpdatedAt) and reports whether it inserted. ListSecrets is by
	// name and leaves Sealed empty. DeleteSecret of an unknown name is
	// ErrNotFound.
	PutSecret(ctx context.Context, s *Secret) (created bool, err error)
	GetSecret(ctx context.Context, tenantID, name string) (*Secret, error)
	ListSecrets(ctx context.Context, tenantID string) ([]*Secret, error)
	DeleteSecret(ctx context.Context, tenantID, name string) error

	// Checkpoints, scoped by tenant. CreateCheckpoint fills ID and
	// CreatedAt when empty. UpdateCheckpoint works like TransitionSandbox
	// with the state set by mutate (from nil: any state). DeleteCheckpoint
	// of an unknown id is ErrNotFound.
	CreateCheckpoint(ctx context.Context, c *Checkpoint) error
	GetCheckpoint(ctx context.Context, tenantID, id string) (*Checkpoint, error)
	ListCheckpoints(ctx context.Context, f CheckpointFilter) (Page[*Checkpoint], error)
	UpdateCheckpoint(ctx context.Context, id string, from []CheckpointState, mutate func(*Checkpoint) error) (*Checkpoint, error)
	DeleteCheckpoint(ctx context.Context, tenantID, id string) error

	// E2B envd access tokens. GetEnvdToken finds a sandbox's token by its
	// hash (ErrNotFound when the sandbox has no such token).
	CreateEnvdToken(ctx context.Context, t *EnvdToken) error
	GetEnvdToken(ctx context.Context, sandboxID, hash string) (*EnvdToken, error)

	// Port URL records of a sandbox. CreatePortToken fills ID and
	// CreatedAt when empty; a private record's Hash is unique within its
	// sandbox (ErrConflict). GetPortTokenByHash finds a private record by
	// its hash (ErrNotFound when the sandbox has none; expired ones are
	// returned, the caller decides). ListPortTokens is oldest first.
	// DeletePortTokens forgets every record of the sandbox (idempotent).
	CreatePortToken(ctx context.Context, t *PortToken) error
	GetPortTokenByHash(ctx context.Context, sandboxID, hash string) (*PortToken, error)
	ListPortTokens(ctx context.Context, sandboxID string) ([]*PortToken, error)
	DeletePortTokens(ctx context.Context, sandboxID string) error
}

// Page is one page of a listing. NextPageToken is empty on the last page.
type Page[T any] struct {
	Items         []T    `json:"items"`
	NextPageToken string `json:"next_page_token,omitempty"`
}

// Page sizes.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// PageRequest selects a page. A zero PageSize means DefaultPageSize; larger
// than MaxPageSize is capped. PageToken is opaque (from NextPageToken); a
// malformed one is ErrInvalidArgument.
type PageRequest struct {
	PageSize  int
	PageToken string
}

// SandboxFilter selects sandboxes, ordered by (created_at, id).
type SandboxFilter struct {
	TenantID      string            // AnyTenant for all
	States        []SandboxState    // only these states (nil: all)
	ExcludeStates []SandboxState    // never these
	Metadata      map[string]string // every key must have exactly this value
	Worker        string            // only on this worker (empty: any)
	PageRequest
}

// OperationFilter selects operations, newest first.
type OperationFilter struct {
	TenantID string // AnyTenant for all
	Target   string // empty: any
	PageRequest
}

// CommandFilter selects a sandbox's command sessions, oldest first.
type CommandFilter struct {
	TenantID  string
	SandboxID string
	PageRequest
}
