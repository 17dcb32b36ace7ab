package store

import "time"

// PrefixPortToken names port URL records (ptk_…).
const PrefixPortToken = "ptk"

// PortToken is one way into a sandbox's guest port from outside: a preview
// URL handed out by POST /v1/sandboxes/{id}/ports/{port}/urls, or a sandbox
// traffic token (Port 0: every port of the sandbox, what E2B calls the
// trafficAccessToken). A private one keeps only the hex SHA-256 of its
// secret (Hash); a public one has no secret (Hash empty) and lets anyone
// reach its port until it expires. Records go with their sandbox
// (DeletePortTokens).
type PortToken struct {
	ID        string
	TenantID  string
	SandboxID string
	// Port is the guest TCP port the record opens; 0 opens every port.
	Port      uint16
	Hash      string
	Public    bool
	CreatedAt time.Time
	// ExpiresAt is when the record stops opening anything; nil: never
	// (traffic tokens live as long as their sandbox).
	ExpiresAt *time.Time
}

// Expired reports whether the record no longer opens its port at now.
func (t *PortToken) Expired(now time.Time) bool {
	return t.ExpiresAt != nil && !now.Before(*t.ExpiresAt)
}
