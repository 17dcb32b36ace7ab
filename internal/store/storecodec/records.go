package storecodec

import "github.com/space-sandbox/space/internal/store"

// IdempotencyColumns are the idempotency columns in the order
// ScanIdempotencyRecord reads.
const IdempotencyColumns = `tenant_id, key, request_hash, status, body, created_at`

// ScanIdempotencyRecord reads one idempotency row of IdempotencyColumns.
func ScanIdempotencyRecord(row Row) (*store.IdempotencyRecord, error) {
	var r store.IdempotencyRecord
	var created int64
	if err := row.Scan(&r.TenantID, &r.Key, &r.RequestHash, &r.Status, &r.Body, &created); err != nil {
		return nil, err
	}
	r.CreatedAt = FromNanos(created)
	return &r, nil
}

// TemplateColumns are the templates columns in the order ScanTemplate reads.
const TemplateColumns = `id, name, digest, state, size_bytes, defaults, created_at, tenant_id`

// ScanTemplate reads one templates row of TemplateColumns.
func ScanTemplate(row Row) (*store.Template, error) {
	var t store.Template
	var defaults *string
	var created int64
	if err := row.Scan(&t.ID, &t.Name, &t.Digest, &t.State, &t.SizeBytes, &defaults, &created, &t.TenantID); err != nil {
		return nil, err
	}
	t.Defaults = RawFrom(defaults)
	t.CreatedAt = FromNanos(created)
	return &t, nil
}
