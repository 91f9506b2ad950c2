-- reads: wi_windows
-- registered: wi_result_steps, wi_result_path
-- writes: whatif_steps, whatif_path
-- param: scenario VARCHAR
-- param: changes VARCHAR
-- Replace a scenario's earlier results for the replayed windows, then store the new ones
-- (wi_result_steps and wi_result_path are filled by the replay).
DELETE FROM whatif_steps WHERE scenario = $scenario
    AND (run_id, rank, step) IN (SELECT run_id, rank, step FROM wi_windows WHERE reported);
DELETE FROM whatif_path WHERE scenario = $scenario
    AND (run_id, rank, step) IN (SELECT run_id, rank, step FROM wi_windows WHERE reported);
INSERT INTO whatif_steps (scenario, changes, run_id, rank, step, measured_us, replay_us, predicted_us, speedup,
                          replay_start_us, replay_end_us, predicted_start_us, predicted_end_us)
SELECT $scenario, $changes, run_id, rank, step, measured_us, replay_us, predicted_us, speedup,
       replay_start_us, replay_end_us, predicted_start_us, predicted_end_us
FROM wi_result_steps;
INSERT INTO whatif_path (scenario, run_id, rank, step, seq, node_id, kind, label, measured_us, predicted_us,
                         node_rank, node_step)
SELECT $scenario, run_id, rank, step, seq, node_id, kind, label, measured_us, predicted_us, node_rank, node_step
FROM wi_result_path;
