-- Device idle with work queued: the part of a path row's gap or idle time in which
-- one of its device ops sat queued on an idle stream with no cause in the trace. Added to
-- critical_path after its first columns so older databases gain them too.
ALTER TABLE critical_path ADD COLUMN IF NOT EXISTS queued_gap_us DOUBLE DEFAULT 0;
ALTER TABLE critical_path ADD COLUMN IF NOT EXISTS queued_idle_us DOUBLE DEFAULT 0;
