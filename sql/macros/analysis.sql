-- Macros used by the critical-path analysis (sql/analysis/*.sql).

-- Runtime calls that block the calling CPU thread until GPU work finishes.
CREATE OR REPLACE TEMP MACRO is_blocking_sync_call(name) AS
    name IN ('cudaDeviceSynchronize', 'cudaStreamSynchronize', 'cudaEventSynchronize', 'cudaMemcpy',
             'hipDeviceSynchronize', 'hipStreamSynchronize', 'hipEventSynchronize', 'hipMemcpy',
             'hipMemcpyWithStream',
             'cuCtxSynchronize', 'cuStreamSynchronize', 'cuEventSynchronize');

-- A copy into pageable host memory: the CPU waits for it even through cudaMemcpyAsync.
CREATE OR REPLACE TEMP MACRO is_blocking_copy(gpu_name) AS
    gpu_name ILIKE '%DtoH%Pageable%' OR gpu_name ILIKE '%Device -> Pageable%';

-- Calls that launch GPU work (matched to it through the correlation id).
CREATE OR REPLACE TEMP MACRO is_runtime_category(cat) AS
    cat IN ('cuda_runtime', 'cuda_driver', 'mtia_runtime', 'privateuse1_runtime', 'privateuse1_driver',
            'Runtime');
