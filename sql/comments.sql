-- Descriptions of every warehouse table and column (the contract, sql/schema/), shown by `.schema
-- TABLE`, in completion and by any DuckDB client (duckdb_tables(), duckdb_columns()).
-- Applied when the database is created or a described column has none (warehouse/core/connection.py,
-- PUBLIC_TABLES); tests/unit/test_column_comments.py fails for a table or column left without one.
COMMENT ON TABLE runs IS 'one row per ingested run (a job: one or more rank files)';
COMMENT ON COLUMN runs.run_id IS 'run key';
COMMENT ON COLUMN runs.name IS 'run name (--run, else the folder or file name)';
COMMENT ON COLUMN runs.ingested_at IS 'when the run was first ingested';
COMMENT ON COLUMN runs.meta IS 'experiment metadata from --meta KEY=VALUE, as a JSON object';
COMMENT ON COLUMN runs.origin_ts IS 'epoch microseconds subtracted from every raw timestamp of the run';

COMMENT ON TABLE traces IS 'one row per rank file of a run';
COMMENT ON COLUMN traces.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN traces.rank IS 'rank of the file';
COMMENT ON COLUMN traces.source_path IS 'path of the file as ingested';
COMMENT ON COLUMN traces.file_sha256 IS 'SHA-256 of the file bytes; a re-ingest of the same file is skipped';
COMMENT ON COLUMN traces.file_bytes IS 'size of the file in bytes';
COMMENT ON COLUMN traces.world_size IS 'ranks in the job (distributedInfo.world_size)';
COMMENT ON COLUMN traces.event_count IS 'traceEvents in the file (every one is in events)';
COMMENT ON COLUMN traces.rank_source IS 'where the rank came from: distributedInfo, file name or default';
COMMENT ON COLUMN traces.time_resolution IS 'us, or ns for microsecond values carrying nanosecond digits';
COMMENT ON COLUMN traces.ts_offset_us IS 'added to raw ts to get epoch microseconds (baseTimeNanoseconds / 1000)';
COMMENT ON COLUMN traces.schema_version IS 'the file''s schemaVersion';
COMMENT ON COLUMN traces.trace_name IS 'the file''s traceName';
COMMENT ON COLUMN traces.distributed_info IS 'the file''s distributedInfo object';
COMMENT ON COLUMN traces.device_properties IS 'the file''s deviceProperties array';
COMMENT ON COLUMN traces.metadata IS 'every other top-level key of the file, verbatim';
COMMENT ON COLUMN traces.ingested_at IS 'when the file was ingested';
COMMENT ON COLUMN traces.clock_offset_us IS 'estimated clock offset against the run''s lowest rank, microseconds (subtract to align; NULL: no estimate)';

COMMENT ON TABLE events IS 'every traceEvent of every file, none dropped; times in us from the run origin';
COMMENT ON COLUMN events.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN events.rank IS 'rank of the file the event comes from';
COMMENT ON COLUMN events.event_id IS 'position of the event in the file''s traceEvents array';
COMMENT ON COLUMN events.name IS 'event name (operator, kernel, annotation ...)';
COMMENT ON COLUMN events.cat IS 'Kineto category: cpu_op, kernel, cuda_runtime, gpu_memcpy, user_annotation ...';
COMMENT ON COLUMN events.ph IS 'trace phase: X complete, i instant, s/f flow, M metadata ...';
COMMENT ON COLUMN events.ts_us IS 'start, microseconds from the run origin';
COMMENT ON COLUMN events.dur_us IS 'duration in microseconds (NULL for events without one)';
COMMENT ON COLUMN events.end_us IS 'ts_us + dur_us, computed when read';
COMMENT ON COLUMN events.pid IS 'process id, or the device for GPU events';
COMMENT ON COLUMN events.tid IS 'thread id, or the stream lane for GPU events';
COMMENT ON COLUMN events.stream IS 'GPU stream of device-side events (args.stream, else the lane tid); -1 = whole device';
COMMENT ON COLUMN events.correlation IS 'links a runtime launch call to the GPU work it launched';
COMMENT ON COLUMN events.external_id IS 'links GPU work and runtime calls to the CPU operator that issued them';
COMMENT ON COLUMN events.ts_raw IS 'the timestamp exactly as written in the file';
COMMENT ON COLUMN events.args IS 'the event''s args object (JSON)';
COMMENT ON COLUMN events.extra IS 'any other keys of the event object (flow ids, bp, instant scope ...)';

COMMENT ON TABLE steps IS 'training steps (ProfilerStep#N annotations) per rank';
COMMENT ON COLUMN steps.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN steps.rank IS 'rank';
COMMENT ON COLUMN steps.step IS 'step number (N of ProfilerStep#N)';
COMMENT ON COLUMN steps.name IS 'the annotation''s name';
COMMENT ON COLUMN steps.start_us IS 'step start, microseconds from the run origin';
COMMENT ON COLUMN steps.end_us IS 'step end, microseconds from the run origin';
COMMENT ON COLUMN steps.dur_us IS 'step duration in microseconds';
COMMENT ON COLUMN steps.whole_trace IS 'true when the trace has no ProfilerStep annotation and the step spans it all';
COMMENT ON COLUMN steps.event_id IS 'the annotation event (events.event_id)';

COMMENT ON TABLE threads IS 'CPU threads and GPU stream lanes of each rank, with their role';
COMMENT ON COLUMN threads.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN threads.rank IS 'rank';
COMMENT ON COLUMN threads.pid IS 'process id (events.pid)';
COMMENT ON COLUMN threads.tid IS 'thread id or stream lane (events.tid)';
COMMENT ON COLUMN threads.name IS 'thread name from the trace metadata';
COMMENT ON COLUMN threads.role IS 'main, autograd, stream or other';
COMMENT ON COLUMN threads.event_count IS 'events on this thread';

COMMENT ON TABLE nodes IS 'dependency-graph nodes built by analyze: per run, rank, step and method';
COMMENT ON COLUMN nodes.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN nodes.rank IS 'rank';
COMMENT ON COLUMN nodes.step IS 'step (window) number';
COMMENT ON COLUMN nodes.method IS 'ctda, per_thread or cross_rank';
COMMENT ON COLUMN nodes.node_id IS 'node key within the run, rank, step and method';
COMMENT ON COLUMN nodes.kind IS 'cpu or gpu';
COMMENT ON COLUMN nodes.phase IS 'training phase from phase_rules (forward, backward, optimizer, communication ...)';
COMMENT ON COLUMN nodes.stream IS 'stream launched onto (cpu) or run on (gpu)';
COMMENT ON COLUMN nodes.tid IS 'OS thread (cpu) or launching thread (gpu)';
COMMENT ON COLUMN nodes.start_us IS 'node start, microseconds from the run origin';
COMMENT ON COLUMN nodes.end_us IS 'node end, microseconds from the run origin';
COMMENT ON COLUMN nodes.event_count IS 'events merged into the node';
COMMENT ON COLUMN nodes.pid IS 'process id (cpu) or device (gpu)';
COMMENT ON COLUMN nodes.carry_in IS 'GPU work of the previous window still running';
COMMENT ON COLUMN nodes.label IS 'first event name, for reading paths';
COMMENT ON COLUMN nodes.ends_with_sync IS 'the node ends with a blocking synchronization call';
COMMENT ON COLUMN nodes.sync_start_us IS 'start of the blocking sync inside this node (cpu)';
COMMENT ON COLUMN nodes.sync_end_us IS 'end of the blocking sync inside this node (cpu)';
COMMENT ON COLUMN nodes.wait_end_us IS 'end of the blocking sync this node waited behind (cpu)';

COMMENT ON TABLE edges IS 'dependency-graph edges built by analyze';
COMMENT ON COLUMN edges.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN edges.rank IS 'rank';
COMMENT ON COLUMN edges.step IS 'step (window) number';
COMMENT ON COLUMN edges.method IS 'ctda, per_thread or cross_rank';
COMMENT ON COLUMN edges.src IS 'node the edge leaves (nodes.node_id)';
COMMENT ON COLUMN edges.dst IS 'node the edge enters (nodes.node_id)';
COMMENT ON COLUMN edges.type IS 'sequential, call, sync or cross_thread';
COMMENT ON COLUMN edges.inferred IS 'sync found from timing, not from cuda_sync events';
COMMENT ON COLUMN edges.effective_end_us IS 'src end, or for a call edge the end of the first launch';

COMMENT ON TABLE critical_path IS 'the critical path of each step: its nodes in order with the time each counts';
COMMENT ON COLUMN critical_path.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN critical_path.rank IS 'rank';
COMMENT ON COLUMN critical_path.step IS 'step (window) number';
COMMENT ON COLUMN critical_path.method IS 'ctda, per_thread or cross_rank';
COMMENT ON COLUMN critical_path.seq IS 'position on the path, 1 = earliest node';
COMMENT ON COLUMN critical_path.node_id IS 'the node (nodes.node_id)';
COMMENT ON COLUMN critical_path.counted_start_us IS 'start of the time this node counts on the path';
COMMENT ON COLUMN critical_path.counted_end_us IS 'end of the time this node counts on the path';
COMMENT ON COLUMN critical_path.counted_us IS 'union of event execution inside the counted window, microseconds';
COMMENT ON COLUMN critical_path.kind IS 'cpu or gpu';
COMMENT ON COLUMN critical_path.edge_type IS 'type of the edge from this node to the next on the path';
COMMENT ON COLUMN critical_path.gap_before_us IS 'time between the previous counted window and this one';
COMMENT ON COLUMN critical_path.gap_kind IS 'slack_before, launch_delay or between_nodes';
COMMENT ON COLUMN critical_path.node_rank IS 'rank of the node: rank for per-rank methods, the rank the path passed through for cross_rank';
COMMENT ON COLUMN critical_path.queued_gap_us IS 'part of gap_before_us in which a device op of this node sat queued on an idle stream with no cause in the trace (events missing, or a wait on another rank)';
COMMENT ON COLUMN critical_path.queued_idle_us IS 'part of the idle time inside this node''s counted window in which one of its device ops sat queued on an idle stream with no cause in the trace';

COMMENT ON TABLE path_events IS 'every event counted on a critical path, with its self and inclusive time';
COMMENT ON COLUMN path_events.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN path_events.rank IS 'rank of the path (critical_path.rank)';
COMMENT ON COLUMN path_events.step IS 'step (window) number';
COMMENT ON COLUMN path_events.method IS 'ctda, per_thread or cross_rank';
COMMENT ON COLUMN path_events.node_id IS 'the path node holding the event (nodes.node_id)';
COMMENT ON COLUMN path_events.event_id IS 'the event (events.event_id)';
COMMENT ON COLUMN path_events.name IS 'event name';
COMMENT ON COLUMN path_events.cat IS 'event category';
COMMENT ON COLUMN path_events.self_us IS 'counted time not inside a nested counted event, microseconds';
COMMENT ON COLUMN path_events.inclusive_us IS 'the event''s overlap with the node''s counted window, microseconds';
COMMENT ON COLUMN path_events.node_rank IS 'rank of the node and event: rank for per-rank methods, the rank the path passed through for cross_rank';

COMMENT ON TABLE analysis_windows IS 'the windows analyze built graphs for: one per run, rank and step';
COMMENT ON COLUMN analysis_windows.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN analysis_windows.rank IS 'rank';
COMMENT ON COLUMN analysis_windows.step IS 'step (window) number';
COMMENT ON COLUMN analysis_windows.name IS 'name of the step or --window annotation';
COMMENT ON COLUMN analysis_windows.start_us IS 'window start, microseconds from the run origin';
COMMENT ON COLUMN analysis_windows.end_us IS 'window end, microseconds from the run origin';
COMMENT ON COLUMN analysis_windows.e2e_end_us IS 'the later of end_us and the end of the GPU work launched inside the window';
COMMENT ON COLUMN analysis_windows.window_us IS 'e2e_end_us - start_us: the step''s time in microseconds';

COMMENT ON TABLE phase_rules IS 'editable phase classification rules: the lowest priority whose patterns all match wins';
COMMENT ON COLUMN phase_rules.priority IS 'rule order, lowest first';
COMMENT ON COLUMN phase_rules.phase IS 'phase given to matching events (nodes.phase)';
COMMENT ON COLUMN phase_rules.name_pattern IS 'case-insensitive regex on the top-level event name; NULL matches anything';
COMMENT ON COLUMN phase_rules.annotation_pattern IS 'case-insensitive regex on the enclosing user annotations (joined by |); NULL matches anything';
COMMENT ON COLUMN phase_rules.thread_role IS 'thread role the event must be on (threads.role); NULL matches anything';
COMMENT ON COLUMN phase_rules.note IS 'what the rule is for';

-- experiments: `meta load` re-creates it with the loaded file's columns, which carry no
-- comment; sql/views/staged_experiments.sql gives the table and its key column these back.
COMMENT ON TABLE experiments IS 'experiment metadata keyed by run name, one column per loaded field (ctda-sql meta load)';
COMMENT ON COLUMN experiments.run IS 'run name (runs.name)';

COMMENT ON TABLE collective_instances IS 'one row per collective call of every rank, matched across its process group by (pg, seq)';
COMMENT ON COLUMN collective_instances.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN collective_instances.rank IS 'rank that made the call';
COMMENT ON COLUMN collective_instances.step IS 'the rank''s step (window) the call was made in';
COMMENT ON COLUMN collective_instances.pg IS 'process group name (''default'' when the trace names none)';
COMMENT ON COLUMN collective_instances.seq IS 'order of the call among the rank''s calls in the group';
COMMENT ON COLUMN collective_instances.name IS 'collective name (allreduce, all_to_all ...)';
COMMENT ON COLUMN collective_instances.nelems IS 'message elements (larger of input and output)';
COMMENT ON COLUMN collective_instances.dtype IS 'element type of the message';
COMMENT ON COLUMN collective_instances.bytes IS 'nelems times the dtype''s size, when both are known';
COMMENT ON COLUMN collective_instances.group_ranks IS 'ranks of the group that are in this run';
COMMENT ON COLUMN collective_instances.enqueue_us IS 'start of the CPU call (c10d op / record_param_comms), rank''s clock, microseconds';
COMMENT ON COLUMN collective_instances.start_us IS 'when this rank''s side began executing (NCCL kernel, gloo worker or the call), rank''s clock, microseconds';
COMMENT ON COLUMN collective_instances.end_us IS 'when this rank''s side ended, rank''s clock, microseconds';
COMMENT ON COLUMN collective_instances.executed_on IS 'nccl_kernel, gloo_worker or cpu_call';
COMMENT ON COLUMN collective_instances.cpu_event_id IS 'the CPU call (events.event_id)';
COMMENT ON COLUMN collective_instances.exec_event_id IS 'the event start_us and end_us come from (events.event_id)';
COMMENT ON COLUMN collective_instances.matched IS 'every rank of the group has this seq, with the same name and size';
COMMENT ON COLUMN collective_instances.unmatched_reason IS 'why the instance is not matched';
COMMENT ON COLUMN collective_instances.aligned_start_us IS 'start_us minus traces.clock_offset_us';
COMMENT ON COLUMN collective_instances.aligned_end_us IS 'end_us minus traces.clock_offset_us';
COMMENT ON COLUMN collective_instances.last_rank IS 'the rank that arrived last (matched instances)';
COMMENT ON COLUMN collective_instances.skew_us IS 'last arrival minus first arrival, aligned clocks, microseconds';
COMMENT ON COLUMN collective_instances.wait_us IS 'how long this rank waited for the last arrival (last arrival minus its own, aligned clocks), microseconds; 0 where its side ended before the last arrival (a buffered send that returned before its receiver arrived)';

COMMENT ON TABLE cross_rank_segments IS 'the stretches of each rank the cross-rank critical path runs through, per step';
COMMENT ON COLUMN cross_rank_segments.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN cross_rank_segments.step IS 'step (window) number of the rank that finished the step last';
COMMENT ON COLUMN cross_rank_segments.hop IS '1 = the rank that finished last; each later hop the rank whose late arrival gated the previous one';
COMMENT ON COLUMN cross_rank_segments.rank IS 'rank of this stretch';
COMMENT ON COLUMN cross_rank_segments.from_us IS 'where the path left this rank (or the window start), rank''s clock, microseconds';
COMMENT ON COLUMN cross_rank_segments.to_us IS 'where the path entered this rank (step end, or its arrival), rank''s clock, microseconds';
COMMENT ON COLUMN cross_rank_segments.gate_pg IS 'process group of the collective through which the path left this rank';
COMMENT ON COLUMN cross_rank_segments.gate_seq IS 'seq of that collective (collective_instances.seq)';

COMMENT ON TABLE whatif_steps IS 'predicted step times of each what-if scenario: one row per scenario, run, rank and step';
COMMENT ON COLUMN whatif_steps.scenario IS 'scenario name (--name, with KEY=V for each --sweep value)';
COMMENT ON COLUMN whatif_steps.changes IS 'the scenario''s changes as given (JSON)';
COMMENT ON COLUMN whatif_steps.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN whatif_steps.rank IS 'rank';
COMMENT ON COLUMN whatif_steps.step IS 'step (window) number';
COMMENT ON COLUMN whatif_steps.measured_us IS 'measured step time, microseconds (analysis_windows.window_us)';
COMMENT ON COLUMN whatif_steps.replay_us IS 'the unchanged replay, microseconds (reproduces measured_us)';
COMMENT ON COLUMN whatif_steps.predicted_us IS 'the replay with the changes, microseconds';
COMMENT ON COLUMN whatif_steps.speedup IS 'replay_us / predicted_us';
COMMENT ON COLUMN whatif_steps.replay_start_us IS 'where the step starts in the unchanged replay, microseconds from the replay''s origin (the run''s earliest replayed step start)';
COMMENT ON COLUMN whatif_steps.replay_end_us IS 'where the step ends in the unchanged replay (replay_start_us + replay_us), microseconds from the replay''s origin';
COMMENT ON COLUMN whatif_steps.predicted_start_us IS 'where the step starts in the replay with the changes, microseconds from the replay''s origin: earlier than replay_start_us when earlier steps got shorter, and such a step may wait longer for another rank';
COMMENT ON COLUMN whatif_steps.predicted_end_us IS 'where the step ends in the replay with the changes (predicted_start_us + predicted_us), microseconds from the replay''s origin';

COMMENT ON TABLE whatif_path IS 'the predicted critical path of each what-if scenario, run, rank and step';
COMMENT ON COLUMN whatif_path.scenario IS 'scenario name (whatif_steps.scenario)';
COMMENT ON COLUMN whatif_path.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN whatif_path.rank IS 'rank';
COMMENT ON COLUMN whatif_path.step IS 'step (window) number';
COMMENT ON COLUMN whatif_path.seq IS 'position on the predicted path, 1 = earliest node';
COMMENT ON COLUMN whatif_path.node_id IS 'the node (nodes.node_id, method ctda)';
COMMENT ON COLUMN whatif_path.kind IS 'cpu or gpu';
COMMENT ON COLUMN whatif_path.label IS 'the node''s label (nodes.label)';
COMMENT ON COLUMN whatif_path.measured_us IS 'the node''s measured duration, microseconds';
COMMENT ON COLUMN whatif_path.predicted_us IS 'its duration under the changes, microseconds';

COMMENT ON TABLE comm_model IS 'alpha-beta fit of each run''s collectives: time = alpha + bus bytes / bus bandwidth';
COMMENT ON COLUMN comm_model.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN comm_model.collective IS 'collective name';
COMMENT ON COLUMN comm_model.alpha_us IS 'fitted latency, microseconds (0 when the fit falls back to throughput only)';
COMMENT ON COLUMN comm_model.bus_bw_gbps IS 'fitted bus bandwidth, GB/s';
COMMENT ON COLUMN comm_model.r2 IS 'fit quality over the fastest sample of each size (NULL: one size)';
COMMENT ON COLUMN comm_model.samples IS 'collective calls measured, over all sizes';
COMMENT ON COLUMN comm_model.sizes IS 'distinct message sizes';

COMMENT ON TABLE schema_version IS 'internal: fingerprint of the schema this database was last set up with';
COMMENT ON COLUMN schema_version.fingerprint IS 'hash of the bundled schema and comment files; a writable open redoes the DDL when it differs';

COMMENT ON TABLE advice_findings IS 'what to fix, ranked by the saving the replay predicts: the last `ctda-sql advise` of each run';
COMMENT ON COLUMN advice_findings.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN advice_findings.place IS 'rank of the finding, 1 = the largest saving';
COMMENT ON COLUMN advice_findings.rule IS 'stable rule id (data_loading, host_sync, pageable_memcpy, launch_bound, exposed_comm, straggler, pipeline_bubble, optimizer, unexplained_idle)';
COMMENT ON COLUMN advice_findings.title IS 'what the rule found, in a line';
COMMENT ON COLUMN advice_findings.fix IS 'one concrete fix a PyTorch user can act on (NULL: none can be named from the trace)';
COMMENT ON COLUMN advice_findings.evidence IS 'path time and share, counts, steps and ranks, top events, and why a saving was not replayed';
COMMENT ON COLUMN advice_findings.scenario IS 'the ctda-sql whatif arguments whose replay gives saving_us';
COMMENT ON COLUMN advice_findings.saving_us IS 'median over steps of (replayed job step - step predicted under the scenario), us; NULL when not replayed';
COMMENT ON COLUMN advice_findings.saving_share IS 'saving_us / the median measured step';
COMMENT ON COLUMN advice_findings.path_us IS 'the pattern''s time on the critical path per step that holds it, us';
COMMENT ON COLUMN advice_findings.steps IS 'steps (windows) where the pattern is on the path';
COMMENT ON COLUMN advice_findings.ranks IS 'ranks where the pattern is on the path';

COMMENT ON TABLE advice_profile IS 'the causal profile of each run''s last advise: the path''s largest regions and what the replay predicts they buy at half and at zero time';
COMMENT ON COLUMN advice_profile.run_id IS 'run key (runs.run_id)';
COMMENT ON COLUMN advice_profile.place IS 'rank of the region by path time, 1 = the largest';
COMMENT ON COLUMN advice_profile.kind IS 'annotation, op, kernel or collective';
COMMENT ON COLUMN advice_profile.label IS 'the region''s event name';
COMMENT ON COLUMN advice_profile.rank IS 'the rank whose collectives the region is; NULL: the region on every rank';
COMMENT ON COLUMN advice_profile.path_us IS 'the region''s critical-path time per step that holds it, us';
COMMENT ON COLUMN advice_profile.saving_at_half_us IS 'the replay''s median saving per step if the region took half its time, us';
COMMENT ON COLUMN advice_profile.saving_at_zero_us IS 'the replay''s median saving per step if the region took no time, us';
COMMENT ON COLUMN advice_profile.note IS 'why the saving at zero is under half the path time, or above it, when it is: the reason of the step that disagrees most';
COMMENT ON COLUMN advice_profile.per_step IS 'per step of the job: the rank whose path holds the region most, its path time there (us), the saving at zero of the job''s step (us), and the reason (NULL where they agree: the saving is at least half the path time and at most 5% + 1 us above it): a near-critical alternative (the rank, stream or thread the replayed path moves to, and by how much) or a wait outside the trace';
