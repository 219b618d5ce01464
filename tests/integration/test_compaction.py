"""Log compaction end to end: real nodes, unmodified Kafka clients (confluent-kafka,
kafka-python, aiokafka). Replicas compact independently below their high watermark; readers
from offset 0 see the newest value per key, offsets keep their holes, a compacted topic
refuses keyless records, idempotent producers carry on after a clean, and a follower whose
leader cleaned past it converges."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from flux.protocol.records import decode_records, iter_batches
from flux.storage import LogConfig, PartitionLog

from tests.integration.helpers import wait_until
from tests.integration.http_helpers import metrics_text

pytestmark = pytest.mark.integration

CLEANER = {"backoff_ms": 100}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
}
KEYS = 25


def _create(bootstrap: str, name: str, replicas: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, 1, replicas, config={**TOPIC_CONFIG, "min.insync.replicas": "1"})]
    )
    futures[name].result(30)


def _producer(bootstrap: str, **extra):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **extra})


def _produce(
    bootstrap: str, topic: str, start: int, count: int, producer=None, **extra
) -> dict[bytes, bytes]:
    producer = producer or _producer(bootstrap, **extra)
    errors = []
    latest = {}
    for i in range(start, start + count):
        key = b"key-%d" % (i % KEYS)
        value = b"value-%d" % i
        latest[key] = value
        producer.produce(
            topic, value, key, on_delivery=lambda e, _m: errors.append(e) if e else None
        )
        if i % 50 == 0:
            producer.flush(30)  # several batches, so several segments
    assert producer.flush(30) == 0
    assert errors == []
    return latest


def _cleans(node) -> float:
    match = re.search(r"^flux_log_cleaner_cleans_total ([0-9.e+]+)$", metrics_text(node), re.M)
    return float(match.group(1)) if match else 0.0


def _read_confluent(bootstrap: str, topic: str, end: int) -> list[tuple[int, bytes, bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = []
    try:
        while not seen or seen[-1][0] < end - 1:
            message = consumer.poll(10)
            assert message is not None, f"stalled after {seen[-1:]}"
            assert message.error() is None, message.error()
            seen.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    return seen


def _read_kafka_python(bootstrap: str, topic: str, end: int) -> list[tuple[int, bytes, bytes]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    seen = []
    try:
        for message in consumer:
            seen.append((message.offset, message.key, message.value))
            if message.offset >= end - 1:
                break
    finally:
        consumer.close()
    return seen


def _read_aiokafka(bootstrap: str, topic: str, end: int) -> list[tuple[int, bytes, bytes]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def read() -> list[tuple[int, bytes, bytes]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        seen = []
        try:
            async for message in consumer:
                seen.append((message.offset, message.key, message.value))
                if message.offset >= end - 1:
                    break
        finally:
            await consumer.stop()
        return seen

    return asyncio.run(asyncio.wait_for(read(), 60))


def _describe(bootstrap: str, http: str) -> dict:
    import json

    from click.testing import CliRunner
    from flux.cli.topic import topic

    result = CliRunner().invoke(
        topic, ["describe", "table", "--json", "--http", http, "--bootstrap", bootstrap]
    )
    assert result.exit_code == 0, result.output
    text = CliRunner().invoke(topic, ["describe", "table", "--http", http, "-b", bootstrap])
    assert "dirty ratio" in text.output and "last clean" in text.output, text.output
    return json.loads(result.output)


def _replica_records(directory: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    log = PartitionLog.open(directory, LogConfig())
    try:
        data = log.read(0, 1 << 30) if log.log_end_offset else b""
        return [
            (r.offset, r.key, r.value)
            for _h, batch in iter_batches(data)
            for r in decode_records(batch)
        ]
    finally:
        log.close()


def test_compacted_topic_keeps_newest_value_per_key_for_every_client(cluster_factory) -> None:
    nodes = cluster_factory(3, cleaner=CLEANER)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    _create(bootstrap, "table", 3)
    idempotent = _producer(bootstrap, **{"enable.idempotence": True})
    latest = _produce(bootstrap, "table", 0, 1000, idempotent)
    # Every replica cleans on its own, below its high watermark.
    wait_until(lambda: all(_cleans(node) > 0 for node in nodes), 60)
    expected = {key: value for key, value in latest.items()}
    for read in (_read_confluent, _read_kafka_python, _read_aiokafka):
        records = read(bootstrap, "table", 1000)
        newest = {key: value for _offset, key, value in records}
        assert newest == expected, read.__name__
        offsets = [offset for offset, _k, _v in records]
        assert offsets == sorted(offsets) and offsets[-1] == 999  # never renumbered
        assert len(records) < 1000  # superseded records are gone
    # fluxctl topic describe shows each replica's cleaner state (dirty ratio, last clean).
    described = _describe(bootstrap, nodes[0].ready["broker_http"])
    (partition,) = described["partitions"]
    assert sorted(partition["cleaner"]) == ["1", "2", "3"]
    for state in partition["cleaner"].values():
        assert state["last_clean_ms"] > 0 and 0 <= state["dirty_ratio"] <= 1
        assert state["cleaned_through"] > 0
    # Flux's own SDK: its consumer moves by batch spans, so a table view loads a compacted
    # log (whose last batches may hold fewer records than offsets) and returns.
    from flux.sdk import Consumer, TableView

    with TableView(bootstrap, "table") as view:
        assert view.snapshot() == expected
    with Consumer(bootstrap, read_old=True) as consumer:
        consumer.assign([("table", 0)])
        seen = {}
        while len(seen) < KEYS or consumer.position(("table", 0)) < 1000:
            for record in consumer.poll(5):
                seen[record.key] = record.value
        assert seen == expected and consumer.position(("table", 0)) == 1000
    # The same idempotent producer carries on: its sequence numbers still follow after the
    # clean removed most of its batches (no OUT_OF_ORDER_SEQUENCE_NUMBER, no duplicates).
    more = _produce(bootstrap, "table", 1000, 200, idempotent)
    assert {k: v for _o, k, v in _read_confluent(bootstrap, "table", 1200)} == {**expected, **more}


def test_keyless_records_are_refused_by_a_compacted_topic(cluster_factory) -> None:
    from confluent_kafka import KafkaError, Producer

    (node,) = cluster_factory(1, cleaner=CLEANER)
    _create(node.bootstrap_servers, "keyed", 1)
    producer = Producer({"bootstrap.servers": node.bootstrap_servers, "acks": "all"})
    outcomes = []
    producer.produce("keyed", b"no key", on_delivery=lambda e, m: outcomes.append(e))
    producer.flush(30)  # its own batch: Kafka refuses a batch holding a keyless record whole
    producer.produce("keyed", b"has key", b"k", on_delivery=lambda e, m: outcomes.append(e))
    producer.flush(30)
    assert outcomes[0] is not None and outcomes[0].code() == KafkaError.INVALID_RECORD
    assert outcomes[1] is None  # the node goes on serving
    assert [(k, v) for _o, k, v in _read_confluent(node.bootstrap_servers, "keyed", 1)] == [
        (b"k", b"has key")
    ]


def test_follower_whose_leader_cleaned_past_it_converges(cluster_factory) -> None:
    nodes = cluster_factory(3, cleaner=CLEANER)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    _create(bootstrap, "catchup", 3)
    _produce(bootstrap, "catchup", 0, 300)
    follower = next(n for n in nodes if n.node_id == 3)
    follower.kill()
    live = [n for n in nodes if n is not follower]
    before = sum(_cleans(n) for n in live)
    latest = _produce(",".join(n.bootstrap_servers for n in live), "catchup", 300, 1500)
    wait_until(lambda: sum(_cleans(n) for n in live) > before, 60)
    follower.start()
    follower.wait_ready()
    from flux.sdk import Admin

    with Admin(bootstrap) as admin:
        wait_until(
            lambda: set(admin.replica_log_end_offsets("catchup")[0].values()) == {1800},
            60,
        )
    for node in nodes:
        node.stop()
    for node in nodes:
        records = _replica_records(node.data_dir / "catchup-0")
        assert {k: v for _o, k, v in records} == latest, node.node_id
        assert records[-1][0] == 1799


def test_list_offsets_and_delete_records_across_holes(cluster_factory) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    (node,) = cluster_factory(1, cleaner=CLEANER)
    bootstrap = node.bootstrap_servers
    _create(bootstrap, "holes", 1)
    _produce(bootstrap, "holes", 0, 600)
    wait_until(lambda: _cleans(node) > 0, 60)
    before = _read_confluent(bootstrap, "holes", 600)
    kept = {offset for offset, _k, _v in before}
    hole = max(o for o in range(600) if o not in kept)  # a removed record's offset
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition("holes", 0)
    # ListOffsets is unchanged by compaction: offsets are never renumbered.
    assert admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(30).offset == 0
    assert admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(30).offset == 600
    # DeleteRecords to an offset whose record the cleaner removed.
    deleted = admin.delete_records([TopicPartition("holes", 0, hole)])[tp].result(30)
    assert deleted.low_watermark == hole
    assert admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(30).offset == hole
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "after-delete"})
    consumer.assign([TopicPartition("holes", 0, OFFSET_BEGINNING)])
    seen = []
    try:
        while not seen or seen[-1][0] < 599:
            message = consumer.poll(10)
            assert message is not None and message.error() is None
            seen.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    # The cleaner may have cleaned again since ``before`` was read (removing more superseded
    # records; it never renumbers or changes one): the read starts at or past the hole, holds
    # only what ``before`` held there, and every key's latest record.
    offsets = [offset for offset, _key, _value in seen]
    assert offsets == sorted(set(offsets)) and offsets[0] >= hole and offsets[-1] == 599
    after_hole = [record for record in before if record[0] >= hole]
    assert set(seen) <= set(after_hole)
    latest = {key: (offset, key, value) for offset, key, value in after_hole}
    assert set(latest.values()) <= set(seen)
