"""Memory topics on a real 3-node cluster: messages past their TTL are removed only once every
group and push subscription committed past them; a full topic refuses produces with a clear
error; and the leader's resident memory returns near its baseline after cleanup."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flux.cluster.launcher import NodeProcess

from tests.integration.cluster_helpers import partitions
from tests.integration.helpers import wait_until
from tests.integration.http_helpers import Subscriber, call, create_everywhere, running_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    root = tmp_path_factory.mktemp("memory-topics")
    with running_cluster(root, 3, message={"cleanup_time": 0.2}) as processes:
        _CLUSTER[:] = processes
        yield processes


_CLUSTER: list[NodeProcess] = []


def _create(node: NodeProcess, name: str, replication_factor: int = 3, **configs: str) -> None:
    create_everywhere(_CLUSTER, name, 1, replication_factor, storage="memory", **configs)


def _offsets(node: NodeProcess, topic: str) -> tuple[int, int]:
    status, answer = call(node, "GET", f"/topics/{topic}/partitions/0/messages?limit=0")
    assert status == 200, answer
    return answer["log_start_offset"], answer["high_watermark"]


def _wait_offsets(node: NodeProcess, topic: str, expected: tuple[int, int]) -> None:
    """Wait until ``topic``'s partition 0 has ``(log start, high watermark) == expected``.
    Cleanup gathers every group's position from every broker each round, so on a loaded
    machine a few rounds may pass before one completes: the wait is a minute, and a timeout
    names the offsets last seen."""
    seen: list[tuple[int, int]] = []

    def reached() -> bool:
        seen.append(_offsets(node, topic))
        return seen[-1] == expected

    try:
        wait_until(reached, timeout_s=60)
    except AssertionError:
        raise AssertionError(f"{topic}: offsets {seen[-1]}, not {expected}, after 60 s") from None


def _commit(nodes: list[NodeProcess], group: str, topic: str, offset: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        result = consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        assert all(tp.error is None for tp in result), result
    finally:
        consumer.close()


def _publish(node: NodeProcess, topic: str, values: list[str]) -> None:
    status, answer = call(
        node, "POST", f"/topics/{topic}/messages", {"messages": [{"value": v} for v in values]}
    )
    assert status == 200, answer


def test_expired_messages_go_only_once_everyone_committed(nodes: list[NodeProcess]) -> None:
    _create(nodes[0], "mem-ttl", **{"message.ttl.ms": "300"})
    _create(nodes[0], "mem-long", **{"message.ttl.ms": "3600000"})
    subscriber = Subscriber().start()
    try:
        status, _ = call(
            nodes[1],
            "POST",
            "/subscribe",
            {"address": subscriber.address, "topics": ["mem-ttl", "mem-long"], "readOld": True},
        )
        assert status == 201
        _publish(nodes[2], "mem-ttl", [f"t{i}" for i in range(10)])
        _publish(nodes[2], "mem-long", [f"l{i}" for i in range(10)])
        _commit(nodes, "slow-group", "mem-ttl", 4)
        _commit(nodes, "slow-group", "mem-long", 10)
        wait_until(lambda: len(subscriber.acked()) == 20)
        # Past its TTL and acknowledged by the subscription, but the group is at 4: kept.
        _wait_offsets(nodes[0], "mem-ttl", (4, 10))
        status, page = call(nodes[1], "GET", "/topics/mem-ttl/partitions/0/messages")
        assert [m["value"] for m in page["messages"]] == [f"t{i}" for i in range(4, 10)]
        _commit(nodes, "slow-group", "mem-ttl", 10)
        _wait_offsets(nodes[0], "mem-ttl", (10, 10))
        # Cleanup ran (above) while every mem-long message is acknowledged but within its TTL.
        assert _offsets(nodes[0], "mem-long") == (0, 10)
        # The followers dropped them too (they take the leader's log start offset).
        leader = partitions(nodes[0], "mem-ttl")[0]["leader_id"]
        for node in nodes:
            if node.node_id != leader:
                wait_until(lambda node=node: _memory_bytes(node, "mem-ttl") == 0)
    finally:
        subscriber.stop()


def _memory_bytes(node: NodeProcess, topic: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    from tests.integration.http_helpers import metrics_text

    for family in text_string_to_metric_families(metrics_text(node)):
        for sample in family.samples:
            if sample.name == "flux_memory_topic_bytes" and sample.labels["topic"] == topic:
                return sample.value
    return -1.0


def test_full_memory_topic_refuses_produces(nodes: list[NodeProcess]) -> None:
    from confluent_kafka import KafkaError, Producer

    _create(nodes[0], "mem-full", **{"memory.bytes.max": "8192"})
    stored = 0
    while True:
        status, answer = call(
            nodes[1], "POST", "/publish", {"message": "x" * 1000, "topic": "mem-full"}
        )
        if status != 200:
            break
        stored += 1
        assert stored < 100
    assert status == 507 and answer["field"] == "memory.bytes.max", answer
    assert "full" in answer["error"]
    assert _offsets(nodes[0], "mem-full") == (0, stored)
    reports = []
    producer = Producer({"bootstrap.servers": nodes[0].bootstrap_servers, "acks": "all"})
    producer.produce("mem-full", value=b"y" * 1000, on_delivery=lambda e, m: reports.append(e))
    producer.flush(30)
    [error] = reports
    assert error is not None and error.code() == KafkaError.POLICY_VIOLATION, error
    assert _offsets(nodes[0], "mem-full") == (0, stored)


def _rss_bytes(node: NodeProcess) -> int:
    with open(f"/proc/{node.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_memory_returns_near_baseline_after_cleanup(nodes: list[NodeProcess]) -> None:
    _create(nodes[0], "mem-rss", replication_factor=1, **{"message.ttl.ms": "100"})
    leader_id = partitions(nodes[0], "mem-rss")[0]["leader_id"]
    leader = next(node for node in nodes if node.node_id == leader_id)
    chunk = ["x" * 100_000 for _ in range(10)]  # 1 MB per request
    # Warm up the code paths (and their allocations) once, then take the baseline.
    for _ in range(5):
        _publish(leader, "mem-rss", chunk)
    wait_until(lambda: _offsets(leader, "mem-rss")[0] == _offsets(leader, "mem-rss")[1])
    # A group that has read nothing yet holds every message while we load.
    start = _offsets(leader, "mem-rss")[1]
    _commit(nodes, "rss-holder", "mem-rss", start)
    baseline = _rss_bytes(leader)
    for _ in range(80):
        _publish(leader, "mem-rss", chunk)
    peak = _rss_bytes(leader)
    assert peak - baseline > 60 << 20, (baseline, peak)  # the data really was held in RAM
    assert _offsets(leader, "mem-rss") == (start, start + 800)
    _commit(nodes, "rss-holder", "mem-rss", start + 800)
    wait_until(lambda: _offsets(leader, "mem-rss")[0] == start + 800)
    # Near the baseline: at most a quarter of what the data took.
    near = baseline + (peak - baseline) // 4
    wait_until(lambda: _rss_bytes(leader) <= near, timeout_s=30)
    print(
        f"RSS MiB: baseline {baseline >> 20}, loaded {peak >> 20}, after {_rss_bytes(leader) >> 20}"
    )
