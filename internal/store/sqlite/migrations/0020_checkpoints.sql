-- Checkpoints: the control-plane record of a kept sandbox state (the worker
-- holds the files). Not tied to the sandbox row's life: a checkpoint outlives
-- its sandbox.
CREATE TABLE checkpoints (
	id              TEXT PRIMARY KEY,
	tenant_id       TEXT NOT NULL REFERENCES tenants(id),
	sandbox_id      TEXT NOT NULL,
	name            TEXT NOT NULL,
	parent          TEXT NOT NULL,
	state           TEXT NOT NULL,
	template        TEXT NOT NULL,
	template_digest TEXT NOT NULL,
	vcpus           INTEGER NOT NULL,
	memory_mib      INTEGER NOT NULL,
	disk_mib        INTEGER NOT NULL,
	worker          TEXT NOT NULL,
	size_bytes      INTEGER NOT NULL,
	created_at      INTEGER NOT NULL
);
CREATE INDEX checkpoints_tenant ON checkpoints(tenant_id, created_at, id);
CREATE INDEX checkpoints_sandbox ON checkpoints(sandbox_id, created_at, id);
