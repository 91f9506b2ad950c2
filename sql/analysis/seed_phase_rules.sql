-- writes: phase_rules
-- Default phase rules, inserted when the table is empty. Edit phase_rules to change them.
INSERT INTO phase_rules
SELECT * FROM (VALUES
    (10, 'Communication', '^(nccl:|c10d::|c10d_|record_param_comms|gloo:|ncclKernel|ncclDevKernel)', NULL, NULL,
         'collectives: NCCL/Gloo ops, c10d, record_param_comms'),
    (11, 'Communication', NULL, '(^|\|)(nccl:|gloo:|c10d)', NULL, 'ops inside a collective annotation'),
    (20, 'DataLoad', 'enumerate\(DataLoader\)|DataLoader|_next_data|__next__|collate|pin_memory', NULL, NULL,
         'DataLoader iterators and collate'),
    (21, 'DataLoad', NULL, 'enumerate\(DataLoader\)|data_?load|DataLoader', NULL, 'inside a data-loading annotation'),
    (30, 'Update', '^Optimizer\.(step|zero_grad)#|^optimizer', NULL, NULL, 'optimizer step and zero_grad'),
    (31, 'Update', NULL, 'Optimizer\.(step|zero_grad)#|## optimizer ##|optimizer', NULL, 'inside an optimizer annotation'),
    (40, 'Backward', NULL, NULL, 'autograd', 'everything the autograd thread runs'),
    (41, 'Backward', '^autograd::engine::evaluate_function|Backward[0-9]*$|^torch::autograd::AccumulateGrad', NULL, NULL,
         'backward nodes run on the main thread'),
    (42, 'Backward', NULL, 'backward', NULL, 'inside a backward annotation'),
    (50, 'Loss', 'loss|cross_entropy|nll_loss|mse_loss|binary_cross_entropy', NULL, NULL, 'loss functions'),
    (51, 'Loss', NULL, 'loss', NULL, 'inside a loss annotation'),
    (60, 'Forward', NULL, 'forward|nn\.Module|DistributedDataParallel|FullyShardedDataParallel|DeepSpeedEngine', NULL,
         'module forwards'),
    (61, 'Forward', '^aten::', NULL, 'main', 'other ATen ops of the main thread'),
    (1000, 'Other', NULL, NULL, NULL, 'anything else')
) AS seed(priority, phase, name_pattern, annotation_pattern, thread_role, note)
WHERE NOT EXISTS (SELECT 1 FROM phase_rules);
