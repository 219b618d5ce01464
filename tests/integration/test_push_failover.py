"""SIGKILL of the broker pushing to a subscriber: the new partition leader resumes delivery
from the last acknowledged (committed) offset. Nothing is skipped; a message in flight at the
kill may be delivered again, and such redeliveries are counted."""

from __future__ import annotations

import time

import pytest
from flux.cluster.launcher import NodeProcess

from tests.integration.cluster_helpers import partitions
from tests.integration.helpers import wait_until
from tests.integration.http_helpers import Subscriber, call

pytestmark = pytest.mark.integration

BEFORE_KILL = 80
AFTER_KILL = 80


def _publish_until_stored(nodes: list[NodeProcess], value: str) -> None:
    """Publish with an id; retry through the failover (a repeat is deduplicated)."""
    deadline = time.monotonic() + 60
    while True:
        for node in nodes:
            try:
                status, _ = call(
                    node, "POST", "/publish", {"id": value, "message": value, "topic": "pushed"}
                )
            except OSError:
                continue
            if status == 200:
                return
        assert time.monotonic() < deadline, f"{value} not stored"
        time.sleep(0.1)


def test_delivery_resumes_from_last_acknowledged_offset_after_sigkill(cluster_factory) -> None:
    nodes: list[NodeProcess] = cluster_factory(3, subscriber={"retry_interval_ms": 100})
    status, answer = call(
        nodes[0],
        "POST",
        "/topics",
        {
            "name": "pushed",
            "partitions": 1,
            "replication_factor": 3,
            "configs": {"min.insync.replicas": "2"},
        },
    )
    assert status == 201, answer
    subscriber = Subscriber().start()
    try:
        status, answer = call(
            nodes[0],
            "POST",
            "/subscribe",
            {"address": subscriber.address, "topics": ["pushed"], "readOld": True},
        )
        assert status == 201, answer
        values = [f"v{i:04d}" for i in range(BEFORE_KILL + AFTER_KILL)]
        for value in values[:BEFORE_KILL]:
            _publish_until_stored(nodes, value)
        wait_until(lambda: len(subscriber.acked()) >= BEFORE_KILL // 2)
        leader_id = partitions(nodes[0], "pushed")[0]["leader_id"]
        leader = next(node for node in nodes if node.node_id == leader_id)
        leader.kill()
        survivors = [node for node in nodes if node is not leader]
        for value in values[BEFORE_KILL:]:
            _publish_until_stored(survivors, value)
        wait_until(lambda: {m["payload"] for m in subscriber.acked()} >= set(values), timeout_s=60)
        received = [(m["offset"], m["payload"]) for m in subscriber.acked()]
        # Nothing skipped: every offset arrived, and with the value stored there.
        assert {payload for _, payload in received} == set(values)
        assert sorted({offset for offset, _ in received}) == list(range(len(values)))
        # In order, except one rewind at the failover to an offset already delivered
        # (at least once: a message acknowledged but not yet committed comes again).
        rewinds = [
            (earlier, later)
            for (earlier, _), (later, _) in zip(received, received[1:], strict=False)
            if later <= earlier
        ]
        assert len(rewinds) <= 1, rewinds
        redelivered = len(received) - len({offset for offset, _ in received})
        print(f"redelivered after the failover: {redelivered}")
        if rewinds:
            earlier, later = rewinds[0]
            assert earlier - later + 1 == redelivered
    finally:
        subscriber.stop()
