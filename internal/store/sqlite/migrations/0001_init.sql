-- Times are INTEGER Unix nanoseconds (UTC); JSON values are TEXT.
CREATE TABLE tenants (
	id             TEXT PRIMARY KEY,
	name           TEXT NOT NULL UNIQUE,
	max_sandboxes  INTEGER NOT NULL DEFAULT 0,
	max_vcpus      INTEGER NOT NULL DEFAULT 0,
	max_memory_mib INTEGER NOT NULL DEFAULT 0,
	created_at     INTEGER NOT NULL
);

CREATE TABLE api_keys (
	id         TEXT PRIMARY KEY,
	tenant_id  TEXT NOT NULL REFERENCES tenants(id),
	prefix     TEXT NOT NULL,
	hash       TEXT NOT NULL UNIQUE,
	admin      INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	revoked_at INTEGER
);
CREATE INDEX api_keys_tenant ON api_keys(tenant_id, created_at, id);

CREATE TABLE sandboxes (
	id                   TEXT PRIMARY KEY,
	tenant_id            TEXT NOT NULL REFERENCES tenants(id),
	template             TEXT NOT NULL,
	template_digest      TEXT NOT NULL,
	state                TEXT NOT NULL,
	vcpus                INTEGER NOT NULL,
	memory_mib           INTEGER NOT NULL,
	disk_mib             INTEGER NOT NULL,
	env                  TEXT NOT NULL,
	metadata             TEXT NOT NULL,
	network              TEXT,
	worker               TEXT NOT NULL,
	timeout_seconds      INTEGER NOT NULL,
	idle_timeout_seconds INTEGER NOT NULL,
	created_at           INTEGER NOT NULL,
	updated_at           INTEGER NOT NULL,
	expires_at           INTEGER,
	last_activity_at     INTEGER NOT NULL,
	last_error           TEXT
);
CREATE INDEX sandboxes_tenant ON sandboxes(tenant_id, created_at, id);
CREATE INDEX sandboxes_order ON sandboxes(created_at, id);
CREATE INDEX sandboxes_state ON sandboxes(state);

CREATE TABLE operations (
	id         TEXT PRIMARY KEY,
	tenant_id  TEXT NOT NULL REFERENCES tenants(id),
	type       TEXT NOT NULL,
	target     TEXT NOT NULL,
	state      TEXT NOT NULL,
	progress   TEXT,
	error      TEXT,
	result     TEXT,
	params     TEXT,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	done_at    INTEGER
);
CREATE INDEX operations_target ON operations(target, created_at, id);
CREATE INDEX operations_tenant ON operations(tenant_id, created_at, id);
CREATE INDEX operations_unfinished ON operations(created_at, id) WHERE state IN ('pending', 'running');

CREATE TABLE commands (
	id         TEXT PRIMARY KEY,
	tenant_id  TEXT NOT NULL REFERENCES tenants(id),
	sandbox_id TEXT NOT NULL REFERENCES sandboxes(id),
	spec       TEXT NOT NULL,
	state      TEXT NOT NULL,
	pid        INTEGER NOT NULL,
	exit       TEXT,
	created_at INTEGER NOT NULL,
	started_at INTEGER
);
CREATE INDEX commands_sandbox ON commands(sandbox_id, created_at, id);

CREATE TABLE idempotency (
	tenant_id    TEXT NOT NULL,
	key          TEXT NOT NULL,
	request_hash TEXT NOT NULL,
	status       INTEGER NOT NULL,
	body         BLOB,
	created_at   INTEGER NOT NULL,
	PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_created ON idempotency(created_at);

CREATE TABLE templates (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	digest     TEXT NOT NULL,
	state      TEXT NOT NULL,
	size_bytes INTEGER NOT NULL,
	defaults   TEXT,
	created_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX templates_name_digest ON templates(name, digest) WHERE digest <> '';
CREATE INDEX templates_name ON templates(name, created_at, id);
