-- Port URL records of sandboxes (preview URLs and E2B traffic tokens): a
-- private one keeps only the SHA-256 of its secret, a public one none.
-- port 0 opens every port of the sandbox; expires_at NULL never expires.
CREATE TABLE port_tokens (
	id         TEXT PRIMARY KEY,
	tenant_id  TEXT NOT NULL,
	sandbox_id TEXT NOT NULL,
	port       INTEGER NOT NULL,
	hash       TEXT NOT NULL,
	public     INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	expires_at INTEGER
);
CREATE INDEX port_tokens_sandbox ON port_tokens(sandbox_id, created_at, id);
CREATE UNIQUE INDEX port_tokens_hash ON port_tokens(sandbox_id, hash) WHERE hash <> '';
