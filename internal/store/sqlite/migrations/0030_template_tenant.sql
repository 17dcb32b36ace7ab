-- A template build belongs to the tenant that built it, or to everyone
-- (tenant_id '') when an admin built it or the server registered it.
ALTER TABLE templates ADD COLUMN tenant_id TEXT NOT NULL DEFAULT '';
