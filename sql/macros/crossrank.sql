-- Collective names as the cross-rank analysis compares them.

-- 'c10d::allreduce_', 'nccl:all_reduce', 'gloo:all_reduce', 'allreduce' -> readable name
-- without the backend prefix and the underscores around it.
CREATE OR REPLACE TEMP MACRO clean_collective_name(name) AS
    trim(regexp_replace(lower(name), '^(c10d::|nccl:|gloo:)', ''), '_');

-- The same collective spelled by different layers compares equal: all_reduce = allreduce.
CREATE OR REPLACE TEMP MACRO collective_key(name) AS
    replace(clean_collective_name(name), '_', '');

-- Collectives whose message size legitimately differs across ranks (not checked). A send and
-- its recv carry one message: their sizes are checked; a fused NCCL SendRecv kernel with no
-- call in the trace may carry a send and a recv of different sizes.
CREATE OR REPLACE TEMP MACRO collective_size_varies(name) AS
    regexp_matches(collective_key(name), '(alltoall|sendrecv|^gather|^scatter|barrier)');

-- NCCL (and RCCL) kernels: a collective's or a send/recv's execution on the device. Each is a
-- node of its own wherever it runs, carry-in included (30_gpu_nodes.sql): the rank it waits for
-- gates it alone.
CREATE OR REPLACE TEMP MACRO is_collective_kernel(name) AS
    starts_with(name, 'ncclKernel') OR starts_with(name, 'ncclDevKernel');
