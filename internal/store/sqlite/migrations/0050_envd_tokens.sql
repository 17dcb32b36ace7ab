-- Hashed access tokens of sandboxes' E2B-compatible envd endpoint
-- (internal/e2b); the secret itself is never stored.
CREATE TABLE envd_tokens (
	sandbox_id TEXT NOT NULL,
	hash       TEXT NOT NULL,
	tenant_id  TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (sandbox_id, hash)
);
