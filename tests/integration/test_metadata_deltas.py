"""Brokers follow the metadata log as deltas (issue 15): after their first image they replay
the records committed since the version they hold, in order, also across an active-controller
failover; a broker further behind than the controllers keep records for catches up with a
whole image (a snapshot). Each broker's view must equal the controller's, partition by
partition."""

from __future__ import annotations

import json
import signal
import urllib.request
from typing import Any

import pytest
from flux.cluster.launcher import NodeProcess

from tests.integration.cluster_helpers import active_controller, create_topic, metadata
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration


def _get(address: str, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as reply:
        return json.loads(reply.read())


def _health(node: NodeProcess) -> dict[str, Any]:
    return _get(node.ready["broker_http"], "/health")


def _controller_view(controller: NodeProcess) -> tuple[int, dict[str, list[tuple]]]:
    answer = _get(controller.ready["controller_http"], "/controller/metadata?version=-1")
    topics = {
        topic["name"]: [
            (p["leader"], sorted(p["isr"]), list(p["replicas"])) for p in topic["partitions"]
        ]
        for topic in answer["image"]["topics"]
    }
    return answer["version"], topics


def _broker_view(node: NodeProcess, names: list[str]) -> dict[str, list[tuple]]:
    topics = {}
    for topic in metadata(node, names)["topics"]:
        partitions = sorted(topic["partitions"], key=lambda p: p["partition_index"])
        topics[topic["name"]] = [
            (p["leader_id"], sorted(p["isr_nodes"]), list(p["replica_nodes"])) for p in partitions
        ]
    return topics


def _wait_same_view(broker: NodeProcess, controller: NodeProcess) -> dict[str, Any]:
    """Wait until ``broker`` applied the controller's version; its partitions then match.
    Compared only at one version: after a failover the controller may still be moving
    leaders and ISRs (fencing the dead node), and a view read a moment later is newer."""

    def settled() -> (
        tuple[int, dict[str, Any], dict[str, list[tuple]], dict[str, list[tuple]]] | None
    ):
        version, expected = _controller_view(controller)
        if _health(broker)["metadata_version"] < version:
            return None
        view = _broker_view(broker, sorted(expected))
        health = _health(broker)
        if health["metadata_version"] != version or _controller_view(controller)[0] != version:
            return None  # moved on while we read: read both again
        return version, health, view, expected

    version, health, view, expected = wait_until(settled, timeout_s=30)
    assert view == expected, f"broker {broker.node_id} at version {version}"
    return health


def test_deltas_in_order_across_a_controller_failover(cluster_factory) -> None:
    nodes = cluster_factory(3)
    controller = wait_until(lambda: active_controller(nodes))
    for index in range(3):
        assert create_topic(nodes[0], f"before-{index}", 3, 3)["error_code"] == 0
    for node in nodes:
        health = _wait_same_view(node, controller)
        # One whole image when the broker started (it held nothing), deltas ever since.
        assert health["metadata_snapshots"] == 1, health
        assert health["metadata_deltas"] > 0, health

    controller.kill()
    survivors = [node for node in nodes if node is not controller]
    successor = wait_until(lambda: active_controller(survivors), timeout_s=20)
    for index in range(3):
        # Two live brokers: the dead one is fenced at once (its port refuses connections).
        assert create_topic(survivors[0], f"after-{index}", 3, 2)["error_code"] == 0
    for node in survivors:
        health = _wait_same_view(node, successor)
        # The new active controller had applied the same commands: no snapshot was needed.
        assert health["metadata_snapshots"] == 1, health


def test_a_broker_far_behind_catches_up_with_a_snapshot(cluster_factory) -> None:
    # One controller keeping only 3 commands as deltas; brokers 2 and 3 on their own nodes.
    nodes = cluster_factory(
        3, controller_ids=[1], broker_ids=[2, 3], controller={"metadata_deltas_max": 3}
    )
    controller, _, laggard = nodes
    assert create_topic(nodes[1], "first", 1, 1)["error_code"] == 0
    assert _wait_same_view(laggard, controller)["metadata_snapshots"] == 1
    laggard._signal(signal.SIGSTOP)
    try:
        for index in range(6):
            assert create_topic(nodes[1], f"while-stopped-{index}", 1, 1)["error_code"] == 0
    finally:
        laggard._signal(signal.SIGCONT)
    health = _wait_same_view(laggard, controller)
    assert health["metadata_snapshots"] == 2, health
    # And it goes on with deltas from there.
    deltas = health["metadata_deltas"]
    assert create_topic(nodes[1], "after", 1, 1)["error_code"] == 0
    health = _wait_same_view(laggard, controller)
    assert health["metadata_snapshots"] == 2 and health["metadata_deltas"] > deltas, health
