-- The schema of store/sqlite's migrations 0001–0050, in PostgreSQL. Times
-- are BIGINT Unix nanoseconds (UTC) so they round-trip exactly; JSON the
-- API hands back byte for byte is TEXT; sandbox metadata is JSONB so
-- listings can filter on it. Ids and names sort bytewise (COLLATE "C"),
-- whatever the database's locale, as page tokens and listings expect.
CREATE TABLE tenants (
	id             TEXT COLLATE "C" PRIMARY KEY,
	name           TEXT COLLATE "C" NOT NULL UNIQUE,
	max_sandboxes  INTEGER NOT NULL DEFAULT 0,
	max_vcpus      INTEGER NOT NULL DEFAULT 0,
	max_memory_mib INTEGER NOT NULL DEFAULT 0,
	created_at     BIGINT NOT NULL
);

CREATE TABLE api_keys (
	id         TEXT COLLATE "C" PRIMARY KEY,
	tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants(id),
	prefix     TEXT NOT NULL,
	hash       TEXT NOT NULL UNIQUE,
	admin      BOOLEAN NOT NULL,
	created_at BIGINT NOT NULL,
	revoked_at BIGINT
);
CREATE INDEX api_keys_tenant ON api_keys(tenant_id, created_at, id);

CREATE TABLE sandboxes (
	id                   TEXT COLLATE "C" PRIMARY KEY,
	tenant_id            TEXT COLLATE "C" NOT NULL REFERENCES tenants(id),
	template             TEXT NOT NULL,
	template_digest      TEXT NOT NULL,
	state                TEXT NOT NULL,
	vcpus                INTEGER NOT NULL,
	memory_mib           INTEGER NOT NULL,
	disk_mib             INTEGER NOT NULL,
	env                  TEXT NOT NULL,
	metadata             JSONB NOT NULL,
	network              TEXT,
	worker               TEXT NOT NULL,
	timeout_seconds      INTEGER NOT NULL,
	idle_timeout_seconds INTEGER NOT NULL,
	created_at           BIGINT NOT NULL,
	updated_at           BIGINT NOT NULL,
	expires_at           BIGINT,
	last_activity_at     BIGINT NOT NULL,
	last_error           TEXT
);
CREATE INDEX sandboxes_tenant ON sandboxes(tenant_id, created_at, id);
CREATE INDEX sandboxes_order ON sandboxes(created_at, id);
CREATE INDEX sandboxes_state ON sandboxes(state);
CREATE INDEX sandboxes_worker ON sandboxes(worker);
CREATE INDEX sandboxes_metadata ON sandboxes USING GIN (metadata jsonb_path_ops);

CREATE TABLE operations (
	id         TEXT COLLATE "C" PRIMARY KEY,
	tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants(id),
	type       TEXT NOT NULL,
	target     TEXT COLLATE "C" NOT NULL,
	state      TEXT NOT NULL,
	progress   TEXT,
	error      TEXT,
	result     TEXT,
	params     TEXT,
	created_at BIGINT NOT NULL,
	updated_at BIGINT NOT NULL,
	done_at    BIGINT
);
CREATE INDEX operations_target ON operations(target, created_at, id);
CREATE INDEX operations_tenant ON operations(tenant_id, created_at, id);
CREATE INDEX operations_order ON operations(created_at, id);
CREATE INDEX operations_unfinished ON operations(created_at, id) WHERE state IN ('pending', 'running');

CREATE TABLE commands (
	id         TEXT COLLATE "C" PRIMARY KEY,
	tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants(id),
	sandbox_id TEXT COLLATE "C" NOT NULL REFERENCES sandboxes(id),
	process_id TEXT NOT NULL,
	spec       TEXT NOT NULL,
	state      TEXT NOT NULL,
	pid        INTEGER NOT NULL,
	exit       TEXT,
	created_at BIGINT NOT NULL,
	started_at BIGINT
);
CREATE INDEX commands_sandbox ON commands(sandbox_id, created_at, id);

CREATE TABLE idempotency (
	tenant_id    TEXT COLLATE "C" NOT NULL,
	key          TEXT COLLATE "C" NOT NULL,
	request_hash TEXT NOT NULL,
	status       INTEGER NOT NULL,
	body         BYTEA,
	created_at   BIGINT NOT NULL,
	PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_created ON idempotency(created_at);

CREATE TABLE templates (
	id         TEXT COLLATE "C" PRIMARY KEY,
	name       TEXT COLLATE "C" NOT NULL,
	tenant_id  TEXT COLLATE "C" NOT NULL DEFAULT '',
	digest     TEXT NOT NULL,
	state      TEXT NOT NULL,
	size_bytes BIGINT NOT NULL,
	defaults   TEXT,
	created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX templates_name_digest ON templates(name, digest) WHERE digest <> '';
CREATE INDEX templates_name ON templates(name, created_at, id);

-- Sealed tenant secrets (internal/secrets seals them; no plaintext here).
CREATE TABLE secrets (
	tenant_id  TEXT COLLATE "C" NOT NULL REFERENCES tenants(id),
	name       TEXT COLLATE "C" NOT NULL,
	sealed     BYTEA NOT NULL,
	created_at BIGINT NOT NULL,
	updated_at BIGINT NOT NULL,
	PRIMARY KEY (tenant_id, name)
);

-- Checkpoints outlive their sandbox: no reference to its row.
CREATE TABLE checkpoints (
	id              TEXT COLLATE "C" PRIMARY KEY,
	tenant_id       TEXT COLLATE "C" NOT NULL REFERENCES tenants(id),
	sandbox_id      TEXT COLLATE "C" NOT NULL,
	name            TEXT NOT NULL,
	parent          TEXT NOT NULL,
	state           TEXT NOT NULL,
	template        TEXT NOT NULL,
	template_digest TEXT NOT NULL,
	vcpus           INTEGER NOT NULL,
	memory_mib      INTEGER NOT NULL,
	disk_mib        INTEGER NOT NULL,
	worker          TEXT NOT NULL,
	size_bytes      BIGINT NOT NULL,
	created_at      BIGINT NOT NULL
);
CREATE INDEX checkpoints_tenant ON checkpoints(tenant_id, created_at, id);
CREATE INDEX checkpoints_sandbox ON checkpoints(sandbox_id, created_at, id);
CREATE INDEX checkpoints_order ON checkpoints(created_at, id);

-- Hashed access tokens of sandboxes' E2B-compatible envd endpoint.
CREATE TABLE envd_tokens (
	sandbox_id TEXT COLLATE "C" NOT NULL,
	hash       TEXT COLLATE "C" NOT NULL,
	tenant_id  TEXT COLLATE "C" NOT NULL,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (sandbox_id, hash)
);
