package storecodec

import "github.com/space-sandbox/space/internal/store"

// SandboxColumns are the sandboxes columns in the order ScanSandbox reads
// and SandboxArgs writes them.
const SandboxColumns = `id, tenant_id, template, template_digest, state, vcpus, memory_mib, disk_mib, env, metadata,
	network, worker, timeout_seconds, idle_timeout_seconds, created_at, updated_at, expires_at, last_activity_at, last_error`

// ScanSandbox reads one sandboxes row of SandboxColumns.
func ScanSandbox(row Row) (*store.Sandbox, error) {
	var sb store.Sandbox
	var env, md string
	var network, lastErr *string
	var created, updated, activity int64
	var expires *int64
	if err := row.Scan(&sb.ID, &sb.TenantID, &sb.Template, &sb.TemplateDigest, &sb.State, &sb.VCPUs, &sb.MemoryMiB,
		&sb.DiskMiB, &env, &md, &network, &sb.Worker, &sb.TimeoutSeconds, &sb.IdleTimeoutSeconds,
		&created, &updated, &expires, &activity, &lastErr); err != nil {
		return nil, err
	}
	var err error
	if sb.Env, err = MapFrom(env); err != nil {
		return nil, err
	}
	if sb.Metadata, err = MapFrom(md); err != nil {
		return nil, err
	}
	if sb.LastError, err = JSONFrom[store.ErrorInfo](lastErr); err != nil {
		return nil, err
	}
	sb.Network = RawFrom(network)
	sb.CreatedAt, sb.UpdatedAt, sb.LastActivityAt = FromNanos(created), FromNanos(updated), FromNanos(activity)
	sb.ExpiresAt = TimePtr(expires)
	return &sb, nil
}

// SandboxArgs are sb's column values, in SandboxColumns order.
func SandboxArgs(sb *store.Sandbox) []any {
	return []any{sb.ID, sb.TenantID, sb.Template, sb.TemplateDigest, string(sb.State), sb.VCPUs, sb.MemoryMiB,
		sb.DiskMiB, MapText(sb.Env), MapText(sb.Metadata), RawText(sb.Network), sb.Worker, sb.TimeoutSeconds,
		sb.IdleTimeoutSeconds, Nanos(sb.CreatedAt), Nanos(sb.UpdatedAt), NullNanos(sb.ExpiresAt),
		Nanos(sb.LastActivityAt), JSONText(sb.LastError)}
}

// NormSandbox makes sb what a read of it returns.
func NormSandbox(sb *store.Sandbox) {
	sb.Env, sb.Metadata = NormMap(sb.Env), NormMap(sb.Metadata)
	sb.CreatedAt, sb.UpdatedAt, sb.LastActivityAt = Norm(sb.CreatedAt), Norm(sb.UpdatedAt), Norm(sb.LastActivityAt)
	sb.ExpiresAt = NormPtr(sb.ExpiresAt)
	if len(sb.Network) == 0 {
		sb.Network = nil
	}
}
