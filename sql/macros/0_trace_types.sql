-- Helpers for reading Kineto fields; temporary macros, defined on every connection.
-- First of the macro files (sorted names): macros are bound when created, so the
-- analyses_* files can call these only if they already exist.

-- Device work that occupies a stream or queue, on every accelerator Kineto writes for:
-- CUDA and ROCm (kernel, gpu_memcpy, gpu_memset), MTIA (mtia_ccp_events; mtia_kernel in
-- older builds), and the capitalised names of non-Kineto exporters. Not annotations or
-- sync markers. The one definition the engine and every analysis use.
-- IN lists of at most four names: DuckDB plans a longer one as a hash (MARK) join, which
-- costs ingest's events insert its parallel, order-keeping plan (sql/ingest/event_rows.sql calls
-- is_device_category; tests/ingest/test_ingest.py checks the plan).
CREATE OR REPLACE TEMP MACRO is_gpu_work(cat) AS
    cat IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'mtia_ccp_events')
    OR cat IN ('mtia_kernel', 'Kernel', 'Memcpy', 'Memset');

-- Device-side categories: their tid is a stream lane, not an OS thread.
CREATE OR REPLACE TEMP MACRO is_device_category(cat) AS
    is_gpu_work(cat) OR cat IN ('cuda_sync', 'gpu_user_annotation');

-- Streams arrive as 7, "7", "0x0" or 4294967295 (an unsigned -1, the device lane); a GPU
-- lane of PyTorch 1.8-1.9 is "stream 7" (its events carry args.stream too, but not always).
CREATE OR REPLACE TEMP MACRO normalize_stream(stream_text) AS
    CASE
        WHEN stream_text IS NULL THEN NULL
        WHEN lower(stream_text) LIKE '0x%'
            THEN TRY_CAST(('0x' || substr(stream_text, 3)) AS BIGINT)
        WHEN TRY_CAST(stream_text AS BIGINT) = 4294967295 THEN -1
        WHEN starts_with(stream_text, 'stream ') THEN TRY_CAST(substr(stream_text, 8) AS BIGINT)
        ELSE TRY_CAST(stream_text AS BIGINT)
    END;

-- PyTorch 1.8-1.9 wrote every record_function range as `Operator`: operators and
-- annotations alike (ProfilerStep#N, enumerate(DataLoader)#..., Optimizer.step#...,
-- `## user ##` ranges). They are told apart by name, as the TensorBoard plugin reads them:
-- an operator is named namespace::op (aten::, c10d::, autograd::engine::evaluate_function:,
-- torch::autograd::AccumulateGrad) or is an autograd node (AddmmBackward0, cpu_op today);
-- any other Operator row is an annotation. `events` keeps the category as the file has it.
CREATE OR REPLACE TEMP MACRO is_legacy_operator(name) AS
    contains(name, '::') OR regexp_matches(name, 'Backward[0-9]*$');

-- CPU operators: cpu_op, and the operators among 1.8-1.9's Operator rows. A CASE, so that
-- the name is looked at on Operator rows only: as an OR, DuckDB runs the regex on every row.
CREATE OR REPLACE TEMP MACRO is_cpu_op_event(cat, name) AS
    CASE WHEN cat = 'Operator' THEN is_legacy_operator(name) ELSE cat = 'cpu_op' END;

-- Annotations (record_function ranges): user_annotation, and the other Operator rows.
CREATE OR REPLACE TEMP MACRO is_annotation_event(cat, name) AS
    CASE WHEN cat = 'Operator' THEN NOT is_legacy_operator(name) ELSE cat = 'user_annotation' END;

-- The modern category of an event: a 1.8-1.9 category under the name it has had since
-- (Operator as cpu_op or user_annotation, by name as above); any other category as it is.
-- For what users name by category (--scale CATEGORY:PATTERN, percentiles' category).
CREATE OR REPLACE TEMP MACRO kineto_category(cat, name) AS
    CASE cat
        WHEN 'Operator' THEN CASE WHEN is_legacy_operator(name) THEN 'cpu_op' ELSE 'user_annotation' END
        WHEN 'Runtime' THEN 'cuda_runtime'
        WHEN 'Kernel' THEN 'kernel'
        WHEN 'Memcpy' THEN 'gpu_memcpy'
        WHEN 'Memset' THEN 'gpu_memset'
        ELSE cat
    END;
