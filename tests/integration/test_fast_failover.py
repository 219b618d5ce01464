"""Fast failure detection (``flux.controller.liveness``): with a 30 s session timeout, a
SIGKILLed broker, or the node of the active controller, is fenced and its partitions led
elsewhere in seconds, because its port refuses connections; a paused broker (whose port still
completes handshakes) is not fenced before its session ends."""

from __future__ import annotations

import os
import signal
import time

import pytest
from flux.protocol.errors import ErrorCode

from tests.integration.cluster_helpers import (
    active_controller,
    create_topic,
    live_brokers,
    partitions,
)
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration

#: Far longer than any wait below: only a probe can fence within these tests.
SLOW_SESSIONS = {"session_timeout_ms": 30_000, "liveness_probe_after_ms": 600}


def _produce_everywhere(bootstrap: str, topic: str, count: int) -> float:
    """Seconds until an idempotent acks=all record was acknowledged on every partition."""
    from confluent_kafka import Producer

    started = time.monotonic()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "message.timeout.ms": 20_000,
        }
    )
    errors: list[object] = []
    for partition in range(count):
        producer.produce(
            topic, b"x", partition=partition, on_delivery=lambda error, _msg: errors.append(error)
        )
    assert producer.flush(25) == 0
    assert errors == [None] * count
    return time.monotonic() - started


def _fenced_within(survivor, victim_id: int, topic: str, timeout_s: float) -> float:
    started = time.monotonic()

    def moved() -> bool:
        parts = partitions(survivor, topic)
        return victim_id not in live_brokers(survivor) and all(
            p["leader_id"] not in (victim_id, -1) and victim_id not in p["isr_nodes"] for p in parts
        )

    wait_until(moved, timeout_s=timeout_s)
    return time.monotonic() - started


def test_a_killed_leader_is_fenced_long_before_its_session_ends(cluster_factory) -> None:
    nodes = cluster_factory(3, controller=SLOW_SESSIONS)
    assert create_topic(nodes[0], "fast", 6, 3)["error_code"] == ErrorCode.NONE
    controller = wait_until(lambda: active_controller(nodes))
    victim = next(node for node in nodes if node is not controller)
    assert any(p["leader_id"] == victim.node_id for p in partitions(nodes[0], "fast"))
    survivor = controller
    victim.kill()
    elapsed = _fenced_within(survivor, victim.node_id, "fast", timeout_s=8)
    print(f"leader SIGKILL to its partitions led elsewhere: {elapsed:.2f} s")
    _produce_everywhere(survivor.bootstrap_servers, "fast", 6)
    # Fenced by a probe, not by the session (30 s): the controller's log says why.
    assert "refuses connections" in controller.log_path.read_text()


def test_the_active_controllers_node_is_fenced_by_the_next_controller(cluster_factory) -> None:
    nodes = cluster_factory(3, controller=SLOW_SESSIONS)
    assert create_topic(nodes[0], "fast", 6, 3)["error_code"] == ErrorCode.NONE
    victim = wait_until(lambda: active_controller(nodes))
    assert any(p["leader_id"] == victim.node_id for p in partitions(nodes[0], "fast"))
    survivor = next(node for node in nodes if node is not victim)
    victim.kill()
    elapsed = _fenced_within(survivor, victim.node_id, "fast", timeout_s=10)
    print(f"active controller's node SIGKILL to its partitions led elsewhere: {elapsed:.2f} s")
    _produce_everywhere(survivor.bootstrap_servers, "fast", 6)


def test_a_paused_broker_is_not_fenced_by_a_probe(cluster_factory) -> None:
    """SIGSTOP for three probe periods: its heartbeats are late and its followers' sessions
    time out, but its listening port still accepts connections, so no probe fences it; it
    resumes as a live broker."""
    nodes = cluster_factory(3, controller=SLOW_SESSIONS)
    assert create_topic(nodes[0], "paused", 3, 3)["error_code"] == ErrorCode.NONE
    controller = wait_until(lambda: active_controller(nodes))
    victim = next(node for node in nodes if node is not controller)
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            assert victim.node_id in live_brokers(controller)
            time.sleep(0.2)
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    assert victim.node_id in live_brokers(controller)
    log = controller.log_path.read_text()
    assert "refuses connections" not in log
    assert f"broker {victim.node_id} is gone" not in log
