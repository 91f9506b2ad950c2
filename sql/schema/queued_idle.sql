-- Device idle with work queued: the part of a path row's gap or idle time in which
-- one of its device ops sat queued on an idle stream with no cause in the trace. Added to
-- critical_path after its first columns so older databases gain them too.

-- part of gap_before_us in which a device op of this node sat queued on an idle stream with no
-- cause in the trace (events missing, or a wait on another rank)
ALTER TABLE critical_path ADD COLUMN IF NOT EXISTS queued_gap_us DOUBLE DEFAULT 0;
-- part of the idle time inside this node's counted window in which one of its device ops sat
-- queued on an idle stream with no cause in the trace
ALTER TABLE critical_path ADD COLUMN IF NOT EXISTS queued_idle_us DOUBLE DEFAULT 0;
