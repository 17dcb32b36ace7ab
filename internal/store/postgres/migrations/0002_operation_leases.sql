-- Operation leases: the control replica holding an unfinished operation
-- ('' for none) and until when, on the database's clock (Unix nanoseconds;
-- 0 for none).
ALTER TABLE operations ADD COLUMN lease_owner TEXT NOT NULL DEFAULT '';
ALTER TABLE operations ADD COLUMN lease_expires_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX operations_lease ON operations(lease_owner) WHERE state IN ('pending', 'running');
