-- Where each node of a what-if's predicted path ran: a multi-rank replay's path follows a
-- collective's wait into the rank that arrived last, so a row of (rank, step) may hold
-- another rank's nodes. Added with ALTER ... IF NOT EXISTS so older databases gain them.

-- rank the node ran on: the row's rank, or the rank the predicted path followed a collective's
-- wait into
ALTER TABLE whatif_path ADD COLUMN IF NOT EXISTS node_rank INTEGER;
-- step (window) of node_rank the node belongs to (nodes.step)
ALTER TABLE whatif_path ADD COLUMN IF NOT EXISTS node_step BIGINT;
