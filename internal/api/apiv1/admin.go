package apiv1

import "time"

// TenantQuotas is what a tenant may hold at once; 0 is unlimited.
type TenantQuotas struct {
	Sandboxes int `json:"sandboxes"`
	VCPUs     int `json:"vcpus"`
	MemoryMiB int `json:"memory_mib"`
}

// TenantInfo is a tenant as the admin listing shows it.
type TenantInfo struct {
	ID        string       `json:"id"`
	Name      string       `json:"name"`
	CreatedAt time.Time    `json:"created_at"`
	Quotas    TenantQuotas `json:"quotas"`
	// Sandboxes counts its live sandboxes (neither deleted nor failed),
	// as its quota counts them.
	Sandboxes int `json:"sandboxes"`
}

// TenantList is the answer of GET /v1/admin/tenants.
type TenantList struct {
	Tenants []TenantInfo `json:"tenants"`
}

// TenantInfoResponse is the answer of PUT /v1/admin/tenants/{name}/quotas.
type TenantInfoResponse struct {
	Tenant TenantInfo `json:"tenant"`
}

// SetQuotasRequest is the body of PUT /v1/admin/tenants/{name}/quotas:
// the fields given replace the tenant's, the others stay.
type SetQuotasRequest struct {
	Sandboxes *int `json:"sandboxes,omitempty"`
	VCPUs     *int `json:"vcpus,omitempty"`
	MemoryMiB *int `json:"memory_mib,omitempty"`
}

// KeyInfo is an API key as the admin listing shows it: never the key or
// its hash.
type KeyInfo struct {
	ID string `json:"id"`
	// Format is "space" or "e2b".
	Format    string     `json:"format"`
	Admin     bool       `json:"admin"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// KeyList is the answer of GET /v1/admin/tenants/{name}/keys.
type KeyList struct {
	Keys []KeyInfo `json:"keys"`
}
