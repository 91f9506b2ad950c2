-- Drops the private temp tables the named steps of overlay_events.sql make, once the overlay
-- is written (_overlay_input holds a row per input event). export/overlay.py runs it.
DROP TABLE IF EXISTS temp._overlay_clocks;
DROP TABLE IF EXISTS temp._overlay_input;
DROP TABLE IF EXISTS temp._overlay_flow_ids;
DROP TABLE IF EXISTS temp._overlay_path;
DROP TABLE IF EXISTS temp._overlay_path_events;
DROP TABLE IF EXISTS temp._overlay_flows;
