-- name: kernel_sequences
-- description: most frequent kernel name sequences launched under a CPU operator, per rank
-- param: operator VARCHAR = aten::linear      CPU ops whose name contains this text (outermost match)
-- param: run VARCHAR = NULL                   run name; all runs when NULL
-- param: rank INTEGER = NULL                  rank; all ranks when NULL
-- param: min_length INTEGER = 3               sequences shorter than this are left out
-- param: top INTEGER = 5                      sequences kept per rank
-- key: occurrences, gpu_us
SELECT run, rank, operator, kernel_count, occurrences, gpu_us, cpu_us, kernel_sequence
FROM analysis_kernel_sequences($run, $rank, $operator, min_length := $min_length)
QUALIFY row_number() OVER (PARTITION BY run, rank ORDER BY occurrences DESC, gpu_us DESC, kernel_sequence) <= $top
ORDER BY run, rank, occurrences DESC, gpu_us DESC;
