-- Helpers for reading Kineto fields; temporary macros, defined on every connection.
-- First of the macro files (sorted names): macros are bound when created, so the
-- analyses_* files can call these only if they already exist.

-- Device-side categories: their tid is a stream lane, not an OS thread.
CREATE OR REPLACE TEMP MACRO is_device_category(cat) AS
    cat IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'cuda_sync', 'gpu_user_annotation',
            'mtia_kernel', 'Kernel', 'Memcpy', 'Memset');

-- GPU work that occupies a stream (not annotations or sync markers).
CREATE OR REPLACE TEMP MACRO is_gpu_work(cat) AS
    cat IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'mtia_kernel', 'Kernel', 'Memcpy', 'Memset');

-- Streams arrive as 7, "7", "0x0" or 4294967295 (an unsigned -1, the device lane).
CREATE OR REPLACE TEMP MACRO normalize_stream(stream_text) AS
    CASE
        WHEN stream_text IS NULL THEN NULL
        WHEN lower(stream_text) LIKE '0x%'
            THEN TRY_CAST(('0x' || substr(stream_text, 3)) AS BIGINT)
        WHEN TRY_CAST(stream_text AS BIGINT) = 4294967295 THEN -1
        ELSE TRY_CAST(stream_text AS BIGINT)
    END;
