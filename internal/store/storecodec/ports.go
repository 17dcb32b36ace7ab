package storecodec

import "github.com/space-sandbox/space/internal/store"

// PortTokenColumns are the port_tokens columns in the order ScanPortToken
// reads and PortTokenArgs writes them.
const PortTokenColumns = `id, tenant_id, sandbox_id, port, hash, public, created_at, expires_at`

// ScanPortToken reads one port_tokens row of PortTokenColumns.
func ScanPortToken(row Row) (*store.PortToken, error) {
	var t store.PortToken
	var port int64
	var public bool
	var created int64
	var expires *int64
	if err := row.Scan(&t.ID, &t.TenantID, &t.SandboxID, &port, &t.Hash, &public, &created, &expires); err != nil {
		return nil, err
	}
	t.Port, t.Public = uint16(port), public
	t.CreatedAt, t.ExpiresAt = FromNanos(created), TimePtr(expires)
	return &t, nil
}

// PortTokenArgs are t's column values, in PortTokenColumns order.
func PortTokenArgs(t *store.PortToken) []any {
	return []any{t.ID, t.TenantID, t.SandboxID, int64(t.Port), t.Hash, t.Public, Nanos(t.CreatedAt), NullNanos(t.ExpiresAt)}
}
