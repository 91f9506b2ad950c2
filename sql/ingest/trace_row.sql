-- writes: traces
-- The `traces` row of one ingested file (a database or a lake partition). Parameters are
-- bound positionally.
INSERT INTO traces (run_id, rank, source_path, file_sha256, file_bytes, world_size, event_count,
                    rank_source, time_resolution, ts_offset_us, schema_version, trace_name,
                    distributed_info, device_properties, metadata, ingested_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);
