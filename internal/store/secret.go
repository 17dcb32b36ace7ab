package store

import "time"

// Secret is one of a tenant's named secrets. The store keeps only the sealed
// value (internal/secrets encrypts it before it gets here); it never sees the
// plaintext and never returns it in listings.
type Secret struct {
	TenantID  string
	Name      string
	Sealed    []byte // ciphertext, opaque to the store
	CreatedAt time.Time
	UpdatedAt time.Time
}
