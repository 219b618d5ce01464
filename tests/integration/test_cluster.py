"""A three-node cluster: Raft controller failover, broker fencing and leader election, the
return of a killed node and of its preferred leadership, and a full restart."""

from __future__ import annotations

import time
import uuid
from collections import Counter

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


def _survivor(nodes, *dead):
    return next(node for node in nodes if node not in dead and node.is_running())


def test_placement_spreads_replicas_and_leaders(cluster_factory) -> None:
    nodes = cluster_factory(3)
    assert live_brokers(nodes[0]) == [1, 2, 3]
    result = create_topic(nodes[0], "spread", 6, 3)
    assert result["error_code"] == ErrorCode.NONE, result
    parts = partitions(nodes[1], "spread")
    assert len(parts) == 6
    assert all(sorted(p["replica_nodes"]) == [1, 2, 3] for p in parts)
    assert all(sorted(p["isr_nodes"]) == [1, 2, 3] for p in parts)
    assert Counter(p["leader_id"] for p in parts) == {1: 2, 2: 2, 3: 2}
    too_many = create_topic(nodes[2], "too-many", 1, 4)
    assert too_many["error_code"] == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "3" in too_many["error_message"]


def test_active_controller_failover(cluster_factory) -> None:
    nodes = cluster_factory(3)
    assert create_topic(nodes[0], "steady", 6, 3)["error_code"] == ErrorCode.NONE
    old = wait_until(lambda: active_controller(nodes))
    old.kill()
    started = time.monotonic()
    new = wait_until(lambda: active_controller(nodes), timeout_s=20)
    assert new is not old
    survivor = _survivor(nodes, old)

    def created() -> bool:
        return create_topic(survivor, f"after-{uuid.uuid4().hex[:6]}", 1, 2)["error_code"] == 0

    wait_until(created, timeout_s=20)
    print(f"controller failover to topic creation: {time.monotonic() - started:.2f} s")
    # The survivors keep (or take over) every partition: a new active controller never fences
    # live brokers whose metadata lags, nor hands leadership to the dead one.
    alive = {node.node_id for node in nodes if node is not old}

    def settled() -> bool:
        parts = partitions(survivor, "steady")
        return all(p["leader_id"] in alive and alive <= set(p["isr_nodes"]) for p in parts)

    wait_until(settled, timeout_s=20)
    assert live_brokers(survivor) == sorted(alive)


def test_broker_failure_elects_new_leaders_and_producer_resumes(cluster_factory) -> None:
    from confluent_kafka import Producer

    nodes = cluster_factory(3)
    assert create_topic(nodes[0], "orders", 6, 3)["error_code"] == ErrorCode.NONE
    before = partitions(nodes[0], "orders")
    victim = next(node for node in nodes if node is not active_controller(nodes))
    led = [p["partition_index"] for p in before if p["leader_id"] == victim.node_id]
    assert led, "placement gives every broker some leaders"
    survivor = _survivor(nodes, victim)
    producer = Producer(
        {
            "bootstrap.servers": survivor.bootstrap_servers,
            "acks": 1,
            "message.timeout.ms": 30000,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    victim.kill()
    started = time.monotonic()

    def moved() -> list[dict] | None:
        now = partitions(survivor, "orders")
        ok = all(now[i]["leader_id"] not in (victim.node_id, -1) for i in led)
        return now if ok else None

    after = wait_until(moved, timeout_s=20)
    for index in led:
        assert after[index]["leader_epoch"] > before[index]["leader_epoch"]
        assert victim.node_id not in after[index]["isr_nodes"]
        assert after[index]["leader_id"] in before[index]["isr_nodes"]
    delivered: list[tuple[int, object]] = []
    for index in led:
        producer.produce(
            "orders",
            value=b"after-failover",
            partition=index,
            on_delivery=lambda error, msg: delivered.append((msg.partition(), error)),
        )
    assert producer.flush(30) == 0
    print(f"broker kill to first successful produce: {time.monotonic() - started:.2f} s")
    assert sorted(delivered) == sorted((index, None) for index in led)


def test_restarted_broker_rejoins_and_regains_preferred_leadership(cluster_factory) -> None:
    nodes = cluster_factory(3)
    assert create_topic(nodes[0], "home", 3, 3)["error_code"] == ErrorCode.NONE
    victim = nodes[2]
    preferred = [
        p["partition_index"]
        for p in partitions(nodes[0], "home")
        if p["replica_nodes"][0] == victim.node_id
    ]
    assert preferred
    victim.kill()
    wait_until(lambda: all(p["leader_id"] != victim.node_id for p in partitions(nodes[0], "home")))
    victim.start()
    victim.wait_ready()
    assert live_brokers(nodes[0]) == [1, 2, 3]

    def restored() -> bool:
        parts = partitions(nodes[0], "home")
        return all(
            parts[i]["leader_id"] == victim.node_id and victim.node_id in parts[i]["isr_nodes"]
            for i in preferred
        )

    wait_until(restored, timeout_s=30)


def test_full_restart_keeps_topics_configs_and_assignments(cluster_factory) -> None:
    nodes = cluster_factory(3)
    assert create_topic(nodes[0], "kept", 4, 2, retention_ms="123456")["error_code"] == 0
    before = partitions(nodes[1], "kept")
    for node in nodes:
        node.stop()
    for node in nodes:
        node.start()
    for node in nodes:
        node.wait_ready()
    after = wait_until(lambda: partitions(nodes[0], "kept"))
    assert [p["replica_nodes"] for p in after] == [p["replica_nodes"] for p in before]
    from flux.protocol.api import ApiKey
    from flux.sdk.wire import KafkaConnection

    with KafkaConnection.from_bootstrap(nodes[2].bootstrap_servers) as conn:
        answer = conn.request(
            ApiKey.DESCRIBE_CONFIGS,
            4,
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": "kept",
                        "configuration_keys": ["retention.ms"],
                    }
                ]
            },
        )
    assert answer["results"][0]["configs"][0]["value"] == "123456"


def test_produce_to_a_follower_names_the_leader(cluster_factory) -> None:
    """KIP-951: from Produce v10 on, NOT_LEADER_OR_FOLLOWER carries the current leader, its
    epoch and its address, so a client retries there without asking for metadata; v9 answers
    as before."""
    from flux.protocol.api import ApiKey
    from flux.protocol.records import build_batch
    from flux.sdk.wire import KafkaConnection

    from tests.integration.helpers import produce

    nodes = cluster_factory(3)
    assert create_topic(nodes[0], "moved", 1, 3)["error_code"] == ErrorCode.NONE
    state = partitions(nodes[0], "moved")[0]
    follower = next(node for node in nodes if node.node_id != state["leader_id"])
    leader = next(node for node in nodes if node.node_id == state["leader_id"])
    records = build_batch([(None, b"v", ())])
    with KafkaConnection.from_bootstrap(follower.bootstrap_servers) as conn:
        answer = conn.request(
            ApiKey.PRODUCE,
            10,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 10000,
                "topic_data": [
                    {"name": "moved", "partition_data": [{"index": 0, "records": records}]}
                ],
            },
        )
        old = produce(conn, "moved", records, version=9)
    result = answer["responses"][0]["partition_responses"][0]
    assert result["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert result["current_leader"] == {
        "leader_id": leader.node_id,
        "leader_epoch": state["leader_epoch"],
    }
    host, port = leader.bootstrap_servers.rsplit(":", 1)
    assert answer["node_endpoints"] == [
        {"node_id": leader.node_id, "host": host, "port": int(port), "rack": None}
    ]
    assert old["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert old.get("current_leader", {}).get("leader_id", -1) == -1  # v9 has no such field
