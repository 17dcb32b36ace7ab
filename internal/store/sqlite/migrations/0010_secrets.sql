-- Sealed tenant secrets (AES-256-GCM by internal/secrets; the plaintext never
-- reaches the database).
CREATE TABLE secrets (
	tenant_id  TEXT NOT NULL REFERENCES tenants(id),
	name       TEXT NOT NULL,
	sealed     BLOB NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (tenant_id, name)
);
