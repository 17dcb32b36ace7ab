package storecodec

import (
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// PrepareCheckpoint checks ck for CreateCheckpoint and fills the ID and
// creation time a create may leave empty, as a read returns it.
func PrepareCheckpoint(ck *store.Checkpoint) error {
	if ck.TenantID == "" || ck.SandboxID == "" || ck.State == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "a checkpoint needs a tenant, a sandbox and a state")
	}
	if ck.ID == "" {
		ck.ID = store.NewID(store.PrefixCheckpoint)
	}
	if ck.CreatedAt.IsZero() {
		ck.CreatedAt = Now()
	}
	ck.CreatedAt = Norm(ck.CreatedAt)
	return nil
}

// PrepareCommand checks cmd for CreateCommand and fills the ID, process ID (=
// ID), state (created) and creation time a create may leave empty, as a read
// returns it.
func PrepareCommand(cmd *store.Command) error {
	if cmd.TenantID == "" || cmd.SandboxID == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "a command needs a tenant and a sandbox")
	}
	if cmd.ID == "" {
		cmd.ID = store.NewID(store.PrefixCommand)
	}
	if cmd.ProcessID == "" {
		cmd.ProcessID = cmd.ID
	}
	if cmd.State == "" {
		cmd.State = store.CommandCreated
	}
	if cmd.CreatedAt.IsZero() {
		cmd.CreatedAt = Now()
	}
	NormCommand(cmd)
	return nil
}

// PrepareEnvdToken checks t for CreateEnvdToken and fills the creation time a
// create may leave empty, as a read returns it.
func PrepareEnvdToken(t *store.EnvdToken) error {
	if t.SandboxID == "" || t.TenantID == "" || t.Hash == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "envd token sandbox, tenant and hash are required")
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = Now()
	}
	return nil
}

// PreparePortToken checks t for CreatePortToken and fills the ID and
// creation time a create may leave empty, as a read returns it. A public
// record carries no hash, a private one must.
func PreparePortToken(t *store.PortToken) error {
	if t.SandboxID == "" || t.TenantID == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "port token sandbox and tenant are required")
	}
	if t.Public != (t.Hash == "") {
		return errdefs.New(errdefs.ErrInvalidArgument, "a private port token needs a hash and a public one none")
	}
	if t.ID == "" {
		t.ID = store.NewID(store.PrefixPortToken)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = Now()
	}
	t.CreatedAt, t.ExpiresAt = Norm(t.CreatedAt), NormPtr(t.ExpiresAt)
	return nil
}

// PrepareOperation checks op for CreateOperation and fills the ID, state
// (pending) and times a create may leave empty; a new operation has no lease
// (only ClaimOperation takes one), as a read returns it.
func PrepareOperation(op *store.Operation) error {
	if op.TenantID == "" || op.Type == "" || op.Target == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "an operation needs a tenant, a type and a target")
	}
	if op.ID == "" {
		op.ID = store.NewID(store.PrefixOperation)
	}
	if op.State == "" {
		op.State = store.OpPending
	}
	t := Now()
	if op.CreatedAt.IsZero() {
		op.CreatedAt = t
	}
	op.UpdatedAt = t
	op.LeaseOwner, op.LeaseExpiresAt = "", time.Time{}
	NormOperation(op)
	return nil
}

// PrepareIdempotencyRecord checks rec for PutIdempotencyRecord and fills the
// creation time a put may leave empty, as a read returns it.
func PrepareIdempotencyRecord(rec *store.IdempotencyRecord) error {
	if rec.Key == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "idempotency key is empty")
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = Now()
	}
	rec.CreatedAt = Norm(rec.CreatedAt)
	return nil
}

// PrepareTemplate checks t for UpsertTemplate and fills the ID and creation
// time an upsert may leave empty, as a read returns it.
func PrepareTemplate(t *store.Template) error {
	if t.Name == "" || t.State == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "a template needs a name and a state")
	}
	if t.ID == "" {
		t.ID = store.NewID(store.PrefixTemplate)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = Now()
	}
	t.CreatedAt = Norm(t.CreatedAt)
	if len(t.Defaults) == 0 {
		t.Defaults = nil
	}
	return nil
}

// PrepareSandbox checks sb for CreateSandbox and fills the ID and times a
// create may leave empty (last activity is creation), as a read returns it.
func PrepareSandbox(sb *store.Sandbox) error {
	if sb.TenantID == "" || sb.State == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "a sandbox needs a tenant and a state")
	}
	if sb.ID == "" {
		sb.ID = store.NewID(store.PrefixSandbox)
	}
	t := Now()
	if sb.CreatedAt.IsZero() {
		sb.CreatedAt = t
	}
	sb.UpdatedAt = t
	if sb.LastActivityAt.IsZero() {
		sb.LastActivityAt = sb.CreatedAt
	}
	NormSandbox(sb)
	return nil
}

// PrepareTenant checks t for CreateTenant and fills the ID and creation time a
// create may leave empty, as a read returns it.
func PrepareTenant(t *store.Tenant) error {
	if t.Name == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "tenant name is required")
	}
	if t.ID == "" {
		t.ID = store.NewID(store.PrefixTenant)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = Now()
	}
	t.CreatedAt = Norm(t.CreatedAt)
	return nil
}

// PrepareAPIKey checks k for CreateAPIKey and fills the ID and creation time a
// create may leave empty, as a read returns it.
func PrepareAPIKey(k *store.APIKey) error {
	if k.TenantID == "" || k.Hash == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "an API key needs a tenant and a hash")
	}
	if k.ID == "" {
		k.ID = store.NewID(store.PrefixAPIKey)
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = Now()
	}
	k.CreatedAt = Norm(k.CreatedAt)
	k.RevokedAt = NormPtr(k.RevokedAt)
	return nil
}
