"""The group coordinator's clock ignores steps of the wall clock (found by a chaos run that
jumped the coordinator's clock an hour ahead and back: the group then got no assignment for
the rest of the run, its join and session deadlines an hour away)."""

from __future__ import annotations

import time

import pytest
from flux.cluster.groups import coordinator


def test_a_wall_clock_step_does_not_move_the_coordinator_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = coordinator._now_ms()
    real_time = time.time
    for step_s in (3600.0, -3600.0):
        monkeypatch.setattr(time, "time", lambda step_s=step_s: real_time() + step_s)
        assert abs(coordinator._now_ms() - before) < 5_000
    monkeypatch.undo()
    # It still tells the wall time (as of the process start, advanced monotonically).
    assert abs(coordinator._now_ms() - time.time() * 1000) < 5_000
    assert coordinator._now_ms() >= before
