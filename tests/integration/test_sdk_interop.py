"""The SDK on one shared 3-node cluster: byte-for-byte interoperability with confluent-kafka
in both directions (same key, same partition), ``read_old``, unknown topics, runtime ``send``.

The tests use distinct topics and groups, so they share the module's cluster.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as ConfluentPartition
from flux.cluster.launcher import NodeProcess, local_cluster_configs
from flux.protocol.partitioner import partition_for_key
from flux.sdk import (
    Admin,
    AsyncConsumer,
    AsyncProducer,
    ConsumedRecord,
    Consumer,
    Message,
    Producer,
    UnknownTopicError,
)

from tests.conftest import FAST_FAILURE_DETECTION
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration

PARTITIONS = 4
#: (key, value, headers): binary, empty and missing parts, so "byte for byte" means something.
RECORDS = [
    (
        f"key-{i}".encode(),
        bytes([i % 256, 0, 255]) + f"value-{i}".encode(),
        [("n", str(i).encode())],
    )
    for i in range(40)
] + [
    (None, b"keyless", []),
    (b"empty-value", b"", [("nul", b"\x00"), ("none", None)]),
    (b"\xff\xfe binary key", None, []),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    """Three nodes (controller + broker each) that do not create topics on first use."""
    extra = {section: dict(keys) for section, keys in FAST_FAILURE_DETECTION.items()}
    extra["broker"]["auto_create_topics"] = False
    extra["broker"]["group_initial_rebalance_delay_ms"] = 0
    nodes = local_cluster_configs(Path(tmp_path_factory.mktemp("sdk-interop")), 3, extra=extra)
    try:
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait_ready()
        yield nodes
    finally:
        for node in nodes:
            node.stop(timeout_s=10.0)


@pytest.fixture(scope="module")
def bootstrap(cluster: list[NodeProcess]) -> str:
    return ",".join(node.bootstrap_servers for node in cluster)


def _create(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions=partitions, replication_factor=3)


def _confluent_read(bootstrap: str, topic: str, count: int) -> list[tuple]:
    consumer = ConfluentConsumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}", "enable.auto.commit": False}
    )
    consumer.assign([ConfluentPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: list[tuple] = []
    try:

        def more() -> bool:
            for message in consumer.consume(num_messages=100, timeout=0.5):
                assert message.error() is None, message.error()
                headers = [(name, value) for name, value in (message.headers() or [])]
                got.append(
                    (message.partition(), message.key(), message.value(), headers, message.offset())
                )
            return len(got) >= count

        wait_until(more, timeout_s=30)
    finally:
        consumer.close()
    return got


def _sdk_read(bootstrap: str, topic: str, count: int) -> list[ConsumedRecord]:
    with Consumer(bootstrap, read_old=True) as consumer:
        consumer.assign_topic(topic)
        got: list[ConsumedRecord] = []
        wait_until(lambda: got.extend(consumer.poll(0.5)) or len(got) >= count, timeout_s=30)
    return got


def test_sdk_writes_what_confluent_reads_byte_for_byte(bootstrap: str) -> None:
    _create(bootstrap, "sdk-to-confluent")
    with Producer(bootstrap, compression="lz4", linger_ms=20) as producer:
        delivered = producer.send(
            "sdk-to-confluent",
            [Message(value, key=key, headers=headers) for key, value, headers in RECORDS],
        )
    for (key, _, _), metadata in zip(RECORDS, delivered, strict=True):
        if key is not None:
            assert metadata.partition == partition_for_key(key, PARTITIONS)
    read = _confluent_read(bootstrap, "sdk-to-confluent", len(RECORDS))
    by_offset = {(p, offset): (p, k, v, h) for p, k, v, h, offset in read}
    assert len(by_offset) == len(RECORDS)
    for (key, value, headers), metadata in zip(RECORDS, delivered, strict=True):
        assert by_offset[(metadata.partition, metadata.offset)] == (
            metadata.partition,
            key,
            value,
            headers,
        )


def test_confluent_writes_what_the_sdk_reads_byte_for_byte(bootstrap: str) -> None:
    _create(bootstrap, "confluent-to-sdk")
    producer = ConfluentProducer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5}
    )
    placed: dict[int, tuple[int, int]] = {}

    def delivered(index: int, error, message) -> None:
        assert error is None, error
        placed[index] = (message.partition(), message.offset())

    for index, (key, value, headers) in enumerate(RECORDS):
        producer.produce(
            "confluent-to-sdk",
            value=value,
            key=key,
            headers=[("i", str(index).encode()), *headers],
            on_delivery=lambda error, message, index=index: delivered(index, error, message),
        )
    assert producer.flush(30) == 0
    records = _sdk_read(bootstrap, "confluent-to-sdk", len(RECORDS))
    by_index = {int(r.headers[0][1]): r for r in records}
    assert len(records) == len(by_index) == len(RECORDS)
    for index, (key, value, headers) in enumerate(RECORDS):
        record = by_index[index]
        assert (record.partition, record.offset) == placed[index]
        assert (record.key, record.value, list(record.headers[1:])) == (key, value, headers)
        if key is not None:  # the same key lands where the SDK would put it
            assert record.partition == partition_for_key(key, PARTITIONS)
    with Producer(bootstrap) as sdk:
        for key, _, _ in RECORDS:
            if key is not None:
                assert sdk.partition_for("confluent-to-sdk", key) == partition_for_key(
                    key, PARTITIONS
                )


def test_read_old_replays_history_and_new_only_sees_later_messages(bootstrap: str) -> None:
    _create(bootstrap, "history", partitions=2)
    with Producer(bootstrap) as producer:
        producer.send("history", [Message(f"old-{i}", key=str(i)) for i in range(10)])
        with Consumer(bootstrap, group_id="replayers", topics=["history"], read_old=True) as old:
            seen: list[bytes] = []
            wait_until(lambda: seen.extend(r.value for r in old.poll(0.5)) or len(seen) >= 10)
            assert sorted(seen) == sorted(f"old-{i}".encode() for i in range(10))
        assigned = threading.Event()
        with Consumer(
            bootstrap,
            group_id="newcomers",
            topics=["history"],
            read_old=False,
            on_assign=lambda partitions: assigned.set(),
        ) as new:
            wait_until(lambda: new.poll(0.2) == [] and assigned.is_set())
            # The member has joined: its positions are the end offsets as of now.
            assert [new.position(tp) for tp in new.assignment()] != []
            producer.send("history", [Message(f"new-{i}", key=str(i)) for i in range(5)])
            fresh: list[bytes] = []
            wait_until(lambda: fresh.extend(r.value for r in new.poll(0.5)) or len(fresh) >= 5)
            assert sorted(fresh) == sorted(f"new-{i}".encode() for i in range(5))
            assert new.poll(0.5) == []  # nothing old arrives late


def test_unknown_topic_raises_without_auto_create(bootstrap: str) -> None:
    async def scenario() -> None:
        async with AsyncProducer(bootstrap) as producer:
            with pytest.raises(UnknownTopicError, match="no-such-topic"):
                await producer.send("no-such-topic", b"x")
        with Admin(bootstrap) as admin:
            assert "no-such-topic" not in admin.list_topics()

    asyncio.run(scenario())


def test_async_runtime_send_acks_per_call_and_delivery_callbacks(bootstrap: str) -> None:
    _create(bootstrap, "runtime-send", partitions=2)
    outcomes: list = []

    async def scenario() -> list[ConsumedRecord]:
        async with AsyncProducer(bootstrap, linger_ms=50) as producer:
            one = await producer.send("runtime-send", Message(b"a", key="k", id="msg-1"), acks=1)
            many = await producer.send("runtime-send", [b"b", {"value": b"c", "key": "k"}])
            future = await producer.produce(
                "runtime-send", b"d", key="k", on_delivery=lambda e, m: outcomes.append((e, m))
            )
            await producer.flush(10)
            assert future.done() and outcomes == [(None, future.result())]
            assert one.partition == partition_for_key(b"k", 2) and len(many) == 2
        async with AsyncConsumer(bootstrap, read_old=True) as consumer:
            await consumer.assign_topic("runtime-send")
            records: list[ConsumedRecord] = []
            while len(records) < 4:
                records += await consumer.poll(1.0)
            return records

    records = asyncio.run(scenario())
    assert sorted(r.value for r in records) == [b"a", b"b", b"c", b"d"]
    (first,) = [r for r in records if r.value == b"a"]
    assert first.message_id == b"msg-1"
