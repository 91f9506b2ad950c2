"""Property tests: on generated two-thread, two-stream training steps, every invariant of the
critical path holds (chain of real edges, disjoint counted windows moving back in time, no
time counted in two steps, 0 < CPCR <= 1, per_thread never above ctda, counted + remainder =
step). The generator also makes what real traces hold: device ops overlapping on one stream
(clock skew, copy engines), blocking device-to-host copies inside `aten::item`, several
steps with GPU work spilling from one into the next, and a kernel in flight before the
profile began."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_helpers import analyzed
from helpers.properties import StepSimulator, action
from invariants import broken_invariants


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, min_size=1, max_size=12), st.sampled_from([0, 0, 40]))
def test_generated_steps_keep_every_invariant(actions, in_flight_us):
    with tempfile.TemporaryDirectory() as folder:
        con = analyzed(StepSimulator(in_flight_us).run(actions), Path(folder))
        try:
            assert broken_invariants(con) == {}
        finally:
            con.close()
