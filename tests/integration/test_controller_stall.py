"""A controller that could not run (its process paused, or its event loop busy opening
thousands of partitions) does not fence the brokers whose heartbeats waited unread meanwhile:
the stall is its own, not theirs."""

from __future__ import annotations

import signal
import time

from tests.integration.cluster_helpers import live_brokers
from tests.integration.helpers import wait_until


def test_a_stalled_controller_does_not_fence_brokers_it_could_not_hear(cluster_factory) -> None:
    [node] = cluster_factory(1)  # sessions end after 2 s of silence (tests' settings)
    assert live_brokers(node) == [node.node_id]
    node._signal(signal.SIGSTOP)
    try:
        time.sleep(3.0)  # the fault itself: longer than a broker session
    finally:
        node._signal(signal.SIGCONT)
    # The first session check after the pause either extends the sessions or fences.
    log_text = wait_until(
        lambda: (
            (text := node.log_path.read_text(errors="replace"))
            and ("session check ran" in text or "fencing them" in text)
            and text
        ),
        timeout_s=30,
    )
    assert "fencing them" not in log_text, node.log_tail()
    assert live_brokers(node) == [node.node_id]
