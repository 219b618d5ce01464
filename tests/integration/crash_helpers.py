"""Helpers for whole-cluster crash tests: acknowledged writes with confluent-kafka, reading
them all back, and waiting for every partition to have a leader."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from flux.cluster.launcher import NodeProcess
from flux.protocol.errors import ErrorCode
from flux.sdk.wire import KafkaConnection

from tests.integration.cluster_helpers import metadata

TOPIC = "ledger"
PARTITIONS = 3


def produce_acknowledged(
    bootstrap: str, count: int, *, prefix: str = "v", topic: str = TOPIC
) -> dict[int, list[bytes]]:
    """Produce ``count`` values with acks=all, round robin over the partitions; the values
    acknowledged, by partition. Every one must be acknowledged. The producer is idempotent:
    without it a retry after a leader change (the first leader appended, the client saw
    NOT_LEADER) stores the value twice, as in Kafka, and "read once" could not be checked."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 50,
        }
    )
    acknowledged: dict[int, list[bytes]] = defaultdict(list)
    errors: list[Any] = []

    def on_delivery(error: Any, message: Any) -> None:
        if error is None:
            acknowledged[message.partition()].append(message.value())
        else:
            errors.append(error)

    for index in range(count):
        producer.produce(
            topic,
            value=f"{prefix}-{index:06d}".encode(),
            partition=index % PARTITIONS,
            on_delivery=on_delivery,
        )
        if index % 500 == 0:
            producer.poll(0)
    assert producer.flush(90) == 0, "not every record was delivered in time"
    assert not errors, errors[:3]
    assert sum(len(values) for values in acknowledged.values()) == count
    return acknowledged


def read_all(bootstrap: str, ends: dict[int, int], topic: str = TOPIC) -> dict[int, list[bytes]]:
    """Every value of ``topic`` below ``ends[partition]``, read with confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "crash-checker", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    read: dict[int, list[bytes]] = defaultdict(list)
    deadline = time.monotonic() + 60
    try:
        while any(len(read[p]) < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"read {dict(read)} of {ends} in 60 s"
            for message in consumer.consume(num_messages=5000, timeout=1.0):
                assert message.error() is None, message.error()
                read[message.partition()].append(message.value())
    finally:
        consumer.close()
    return read


def high_watermarks(node: NodeProcess, topic: str = TOPIC) -> dict[int, int]:
    """Each partition's high watermark, asked of its leader through ``node``'s metadata."""
    from flux.protocol.api import ApiKey

    ends = {}
    answer = metadata(node, [topic])
    brokers = {b["node_id"]: b for b in answer["brokers"]}
    for partition in answer["topics"][0]["partitions"]:
        index = partition["partition_index"]
        leader = partition["leader_id"]
        address = f"{brokers[leader]['host']}:{brokers[leader]['port']}"
        with KafkaConnection.from_bootstrap(address, timeout_s=10) as conn:
            answer = conn.request(
                ApiKey.LIST_OFFSETS,
                5,
                {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {
                                    "partition_index": index,
                                    "current_leader_epoch": -1,
                                    "timestamp": -1,
                                }
                            ],
                        }
                    ],
                },
            )
        result = answer["topics"][0]["partitions"][0]
        assert result["error_code"] == ErrorCode.NONE, result
        ends[index] = result["offset"]
    return ends


def leaders(node: NodeProcess, topic: str = TOPIC) -> dict[int, int]:
    """Partition -> leader id (-1 when offline) as ``node`` sees it; {} if it cannot say."""
    try:
        answer = metadata(node, [topic])
    except (OSError, ConnectionError, TimeoutError):
        return {}
    entry = answer["topics"][0]
    if entry["error_code"] != ErrorCode.NONE:
        return {}
    return {p["partition_index"]: p["leader_id"] for p in entry["partitions"]}


def isrs(node: NodeProcess, topic: str = TOPIC) -> dict[int, list[int]]:
    entry = metadata(node, [topic])["topics"][0]
    return {p["partition_index"]: sorted(p["isr_nodes"]) for p in entry["partitions"]}


def wait_all_led(
    nodes: list[NodeProcess], allowed: set[int], timeout_s: float, topic: str = TOPIC
) -> float:
    """Wait until every partition of ``topic`` is led by one of ``allowed``, as every running
    node of ``nodes`` sees it; the seconds it took."""
    started = time.monotonic()
    while True:
        views = [leaders(node, topic) for node in nodes if node.is_running()]
        if views and all(
            len(view) == PARTITIONS and set(view.values()) <= allowed for view in views
        ):
            return time.monotonic() - started
        assert time.monotonic() - started < timeout_s, f"leaders after {timeout_s} s: {views}"
        time.sleep(0.1)


def check_nothing_lost(acknowledged: dict[int, list[bytes]], read: dict[int, list[bytes]]) -> None:
    """Every acknowledged value was read, once, in the order it was acknowledged."""
    for partition, values in acknowledged.items():
        positions: dict[bytes, int] = {}
        for position, value in enumerate(read[partition]):
            assert value not in positions, f"partition {partition}: {value!r} read twice"
            positions[value] = position
        missing = [value for value in values if value not in positions]
        assert not missing, f"partition {partition}: {len(missing)} acknowledged lost"
        order = [positions[value] for value in values]
        assert order == sorted(order), f"partition {partition}: acknowledged order not kept"
