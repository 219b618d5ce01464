"""Message-id deduplication with an unmodified Kafka client (confluent-kafka): the same
``flux-msg-id`` header produced twice is stored once, also when the repeat arrives after the
partition's leader was SIGKILLed (the new leader rebuilt the window from its log)."""

from __future__ import annotations

import pytest
from flux.cluster.launcher import NodeProcess

from tests.integration.cluster_helpers import active_controller, partitions
from tests.integration.helpers import wait_until
from tests.integration.http_helpers import call

pytestmark = pytest.mark.integration


def _produce(producer, topic: str, value: bytes, message_id: str) -> int:
    """Produce one message with its id header; its acknowledged offset."""
    reports = []
    producer.produce(
        topic,
        value=value,
        partition=0,
        headers=[("flux-msg-id", message_id.encode())],
        on_delivery=lambda error, message: reports.append((error, message)),
    )
    assert producer.flush(60) == 0
    [(error, message)] = reports
    assert error is None, error
    return message.offset()


def test_kafka_header_id_stored_once_across_leader_failover(cluster_factory) -> None:
    from confluent_kafka import Producer

    nodes: list[NodeProcess] = cluster_factory(3)
    status, answer = call(
        nodes[0],
        "POST",
        "/topics",
        {
            "name": "payments",
            "partitions": 1,
            "replication_factor": 3,
            "configs": {"min.insync.replicas": "2"},
        },
    )
    assert status == 201, answer
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 100,
        }
    )
    first = _produce(producer, "payments", b"charge-1", "pay-1")
    assert _produce(producer, "payments", b"charge-1 again", "pay-1") == first
    second = _produce(producer, "payments", b"charge-2", "pay-2")
    assert second == first + 1

    leader_id = partitions(nodes[0], "payments")[0]["leader_id"]
    leader = next(node for node in nodes if node.node_id == leader_id)
    leader.kill()
    survivor = next(node for node in nodes if node is not leader)
    wait_until(
        lambda: partitions(survivor, "payments")[0]["leader_id"] not in (-1, leader_id),
        timeout_s=30,
    )
    wait_until(lambda: active_controller([n for n in nodes if n is not leader]))
    # The repeats after failover are acknowledged with their original offsets, not stored.
    assert _produce(producer, "payments", b"charge-1 retried", "pay-1") == first
    assert _produce(producer, "payments", b"charge-2 retried", "pay-2") == second
    third = _produce(producer, "payments", b"charge-3", "pay-3")
    assert third == second + 1

    status, page = call(survivor, "GET", "/topics/payments/partitions/0/messages?limit=100")
    assert status == 200, page
    assert [(m["id"], m["value"]) for m in page["messages"]] == [
        ("pay-1", "charge-1"),
        ("pay-2", "charge-2"),
        ("pay-3", "charge-3"),
    ]
