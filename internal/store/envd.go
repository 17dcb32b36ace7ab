package store

import "time"

// EnvdToken is one access token of a sandbox's E2B-compatible in-sandbox
// ("envd") endpoint, stored as the hex SHA-256 of the secret. A sandbox may
// have several (each E2B connect hands out a fresh one); any of them
// authorises envd calls for that sandbox, and only for it.
type EnvdToken struct {
	SandboxID string
	TenantID  string
	Hash      string
	CreatedAt time.Time
}
