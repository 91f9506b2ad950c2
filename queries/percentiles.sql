-- name: percentiles
-- description: p50/p95/p99 and count of event durations per name and rank
-- param: run VARCHAR = NULL                   run name; all runs when NULL
-- param: rank INTEGER = NULL                  rank; all ranks when NULL
-- param: cat VARCHAR = NULL                   event category (kernel, cpu_op, user_annotation ...); all when NULL
-- param: name_like VARCHAR = NULL             LIKE pattern on the name; all when NULL
-- param: top INTEGER = 50                     rows kept, by total time
-- key: p50_us, p95_us, p99_us
SELECT run, rank, cat, name, event_count, p50_us, p95_us, p99_us, mean_us, max_us
FROM analysis_percentiles($run, $rank, category := $cat, name_pattern := $name_like)
ORDER BY mean_us * event_count DESC, run, rank, name
LIMIT $top;
