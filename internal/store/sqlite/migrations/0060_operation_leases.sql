-- Operation leases: the control replica holding an unfinished operation
-- ('' for none) and until when (Unix nanoseconds; 0 for none).
ALTER TABLE operations ADD COLUMN lease_owner TEXT NOT NULL DEFAULT '';
ALTER TABLE operations ADD COLUMN lease_expires_at INTEGER NOT NULL DEFAULT 0;
