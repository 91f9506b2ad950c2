"""Property tests of the what-if replay on generated two-thread, two-stream training steps
(test_engine_properties.StepSimulator): the unchanged replay reproduces every measured step,
and a change that only removes work never predicts a negative step nor lengthens the run
(the replay is a max-plus system: shorter durations cannot end anything later)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_helpers import analyzed
from test_engine_properties import OP_NAMES, StepSimulator, action
from warehouse.whatif import Scale, Scenario, whatif

shrink = st.builds(Scale, st.sampled_from(OP_NAMES + ("kernel_*", "*", "Memcpy*", "cudaDeviceSynchronize")),
                   st.sampled_from([0.0, 0.5, 0.9]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, min_size=1, max_size=12), st.sampled_from([0, 0, 40]), st.lists(shrink, min_size=1, max_size=2))
def test_replay_reproduces_each_step_and_removing_work_never_lengthens_the_run(actions, in_flight_us, scales):
    with tempfile.TemporaryDirectory() as folder:
        con = analyzed(StepSimulator(in_flight_us).run(actions), Path(folder))
        try:
            unchanged = whatif(con, persist=False).steps
            assert all(abs(row[5] - row[3]) <= 1e-6 * max(row[3], 1.0) for row in unchanged), unchanged
            changed = whatif(con, scenario=Scenario(scales=tuple(scales)), persist=False).steps
            assert all(row[5] >= 0 for row in changed), changed
            assert sum(row[5] for row in changed) <= sum(row[3] for row in changed) * (1 + 1e-9) + 1e-6, changed
        finally:
            con.close()
