-- The id the guest agent knows a command's process by: the command's own id,
-- except for a command a branch inherited from its checkpoint, whose process
-- the agent still knows by the parent's command id.
ALTER TABLE commands ADD COLUMN process_id TEXT NOT NULL DEFAULT '';
UPDATE commands SET process_id = id;
