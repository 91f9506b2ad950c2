-- name: unmatched_collectives
-- description: collective instances with no complete match across the ranks of their group, and why
-- param: run VARCHAR = NULL        run name; all runs when NULL
-- param: top INTEGER = 1000        rows to keep
-- key: name, reason
SELECT r.name AS run, i.rank, i.step, i.pg, i.seq, i.name, i.nelems, i.bytes, i.group_ranks,
       i.enqueue_us, i.start_us, i.end_us, i.executed_on, i.unmatched_reason AS reason
FROM collective_instances AS i
JOIN runs AS r USING (run_id)
WHERE NOT i.matched AND ($run IS NULL OR r.name = $run)
ORDER BY run, i.pg, i.seq, i.rank
LIMIT $top;
