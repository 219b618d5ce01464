"""``ConnectionLimit``: the decision at the limit, the refusal count, and a log that says each
refusal at most once per interval, with how many it left out."""

from __future__ import annotations

import logging

import pytest
from flux.cluster.connection_limit import REFUSAL_LOG_INTERVAL_S, ConnectionLimit


def test_refusals_past_the_limit_are_counted_and_logged_at_most_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    refused: list[int] = []
    limit = ConnectionLimit(
        "PLAINTEXT",
        3,
        log=logging.getLogger("test.limit"),
        on_refused=lambda: refused.append(1),
        clock=lambda: now[0],
    )
    caplog.set_level(logging.WARNING, logger="test.limit")
    assert limit.admits(0, "a") and limit.admits(2, "a")
    assert not refused and not caplog.records
    assert not limit.admits(3, ("127.0.0.1", 5000))
    assert not limit.admits(4, "b")
    assert not limit.admits(3, "c")
    assert len(refused) == 3
    assert len(caplog.records) == 1
    first = caplog.records[0].getMessage()
    assert "127.0.0.1" in first and "PLAINTEXT" in first and "broker.max_connections" in first
    now[0] += REFUSAL_LOG_INTERVAL_S
    assert not limit.admits(3, "d")
    assert len(caplog.records) == 2
    assert "(2 more refused since the last such line)" in caplog.records[1].getMessage()
    assert limit.admits(2, "e")


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ConnectionLimit("HTTP", 0, log=logging.getLogger("test.limit"))
