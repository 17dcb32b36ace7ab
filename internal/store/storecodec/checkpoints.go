package storecodec

import "github.com/space-sandbox/space/internal/store"

// CheckpointColumns are the checkpoints columns in the order ScanCheckpoint
// reads and CheckpointArgs writes them.
const CheckpointColumns = `id, tenant_id, sandbox_id, name, parent, state, template, template_digest, vcpus, memory_mib,
	disk_mib, worker, size_bytes, created_at`

// ScanCheckpoint reads one checkpoints row of CheckpointColumns.
func ScanCheckpoint(row Row) (*store.Checkpoint, error) {
	var c store.Checkpoint
	var created int64
	if err := row.Scan(&c.ID, &c.TenantID, &c.SandboxID, &c.Name, &c.Parent, &c.State, &c.Template, &c.TemplateDigest,
		&c.VCPUs, &c.MemoryMiB, &c.DiskMiB, &c.Worker, &c.SizeBytes, &created); err != nil {
		return nil, err
	}
	c.CreatedAt = FromNanos(created)
	return &c, nil
}

// CheckpointArgs are c's column values, in CheckpointColumns order.
func CheckpointArgs(c *store.Checkpoint) []any {
	return []any{c.ID, c.TenantID, c.SandboxID, c.Name, c.Parent, string(c.State), c.Template, c.TemplateDigest,
		c.VCPUs, c.MemoryMiB, c.DiskMiB, c.Worker, c.SizeBytes, Nanos(c.CreatedAt)}
}
