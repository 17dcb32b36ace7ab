package storecodec

import "github.com/space-sandbox/space/internal/store"

// TenantColumns are the tenants columns in the order ScanTenant reads.
const TenantColumns = `id, name, max_sandboxes, max_vcpus, max_memory_mib, created_at`

// ScanTenant reads one tenants row of TenantColumns.
func ScanTenant(row Row) (*store.Tenant, error) {
	var t store.Tenant
	var created int64
	if err := row.Scan(&t.ID, &t.Name, &t.Quota.MaxSandboxes, &t.Quota.MaxVCPUs, &t.Quota.MaxMemoryMiB, &created); err != nil {
		return nil, err
	}
	t.CreatedAt = FromNanos(created)
	return &t, nil
}

// APIKeyColumns are the api_keys columns in the order ScanAPIKey reads.
const APIKeyColumns = `id, tenant_id, prefix, hash, admin, created_at, revoked_at`

// ScanAPIKey reads one api_keys row of APIKeyColumns.
func ScanAPIKey(row Row) (*store.APIKey, error) {
	var k store.APIKey
	var created int64
	var revoked *int64
	if err := row.Scan(&k.ID, &k.TenantID, &k.Prefix, &k.Hash, &k.Admin, &created, &revoked); err != nil {
		return nil, err
	}
	k.CreatedAt = FromNanos(created)
	k.RevokedAt = TimePtr(revoked)
	return &k, nil
}
