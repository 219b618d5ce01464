"""Idempotent producers: retries across a leader SIGKILL neither duplicate nor reorder, and
the broker refuses sequences that skip or come from a fenced epoch."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch
from flux.sdk.wire import KafkaConnection

from tests.integration.cluster_helpers import active_controller, partitions
from tests.integration.helpers import read_values, wait_until
from tests.integration.test_replication import _create, list_offset_of

pytestmark = pytest.mark.integration

VALUES = 20_000


def test_idempotent_producer_survives_leader_kill_without_duplicates(cluster_factory) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    nodes = cluster_factory(3)
    _create(nodes[0], "exactly", [[1, 2, 3], [2, 3, 1], [3, 1, 2]], **{"min.insync.replicas": "2"})
    controller = wait_until(lambda: active_controller(nodes))
    victim = next(node for node in nodes if node is not controller)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,  # acks=all, retries, in-flight <= 5 with ordering kept
            "linger.ms": 2,
            "message.timeout.ms": 120000,
            "retry.backoff.ms": 50,
        }
    )
    acknowledged: dict[int, list[bytes]] = defaultdict(list)
    errors: list[object] = []

    def on_delivery(error, message) -> None:
        if error is None:
            acknowledged[message.partition()].append(message.value())
        else:
            errors.append(error)

    for index in range(VALUES):
        producer.produce(
            "exactly", value=b"e-%06d" % index, partition=index % 3, on_delivery=on_delivery
        )
        if index % 500 == 0:
            producer.poll(0)
        if index == VALUES // 2:
            victim.kill()  # in flight: batches to its partitions are retried on the new leaders
    assert producer.flush(120) == 0
    assert errors == []
    survivor = next(node for node in nodes if node is not victim)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    ends = {p: list_offset_of(survivor, "exactly", p) for p in range(3)}
    consumer.assign([TopicPartition("exactly", p, 0) for p in range(3)])
    read: dict[int, list[bytes]] = defaultdict(list)
    deadline = time.monotonic() + 60
    while sum(map(len, read.values())) < sum(ends.values()) and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=5000, timeout=1.0):
            assert message.error() is None, message.error()
            read[message.partition()].append(message.value())
    consumer.close()
    for partition in range(3):
        expected = [b"e-%06d" % i for i in range(partition, VALUES, 3)]
        assert acknowledged[partition] == expected, f"partition {partition}: acknowledgement order"
        assert read[partition] == expected, f"partition {partition}: duplicates or reordering"


def _send(
    conn: KafkaConnection, producer_id: int, epoch: int, sequence: int, values: list[bytes]
) -> dict:
    records = build_batch(
        [(None, value, ()) for value in values],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 10000,
        "topic_data": [{"name": "seq", "partition_data": [{"index": 0, "records": records}]}],
    }
    return conn.request(ApiKey.PRODUCE, 7, body)["responses"][0]["partition_responses"][0]


def test_sequences_that_skip_repeat_or_come_from_a_fenced_epoch(cluster_factory) -> None:
    node = cluster_factory(1)[0]
    _create(node, "seq", [[1]])
    with KafkaConnection.from_bootstrap(node.bootstrap_servers) as conn:
        init = conn.request(
            ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000}
        )
        assert init["error_code"] == ErrorCode.NONE and init["producer_epoch"] == 0
        producer_id = init["producer_id"]
        other = conn.request(
            ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000}
        )
        assert other["producer_id"] != producer_id

        first = _send(conn, producer_id, 0, 0, [b"a", b"b"])
        assert (first["error_code"], first["base_offset"]) == (ErrorCode.NONE, 0)
        retried = _send(conn, producer_id, 0, 0, [b"a", b"b"])
        assert (retried["error_code"], retried["base_offset"]) == (ErrorCode.NONE, 0)
        gap = _send(conn, producer_id, 0, 5, [b"x"])
        assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        bumped = conn.request(
            ApiKey.INIT_PRODUCER_ID,
            4,
            {
                "transactional_id": None,
                "transaction_timeout_ms": 60000,
                "producer_id": producer_id,
                "producer_epoch": 0,
            },
        )
        assert (bumped["producer_id"], bumped["producer_epoch"]) == (producer_id, 1)
        assert _send(conn, producer_id, 1, 0, [b"c"])["error_code"] == ErrorCode.NONE
        fenced = _send(conn, producer_id, 0, 2, [b"zombie"])
        assert fenced["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert [value for _, value in read_values(conn, "seq")] == [b"a", b"b", b"c"]

    # The producer state survives a restart: the same retry is still recognized.
    node.kill()
    node.start()
    node.wait_ready()
    with KafkaConnection.from_bootstrap(node.bootstrap_servers) as conn:
        wait_until(lambda: partitions(node, "seq")[0]["leader_id"] == 1)
        again = _send(conn, producer_id, 1, 0, [b"c"])
        assert (again["error_code"], again["base_offset"]) == (ErrorCode.NONE, 2)
        assert [value for _, value in read_values(conn, "seq")] == [b"a", b"b", b"c"]


def test_kafka_python_and_aiokafka_idempotent_producers(broker) -> None:
    """kafka-python 3 turns idempotence (and acks=all) on by default; aiokafka on request."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    futures = [producer.send("both", b"kp-%d" % i, partition=0) for i in range(100)]
    producer.flush()
    assert [f.get(timeout=30).offset for f in futures] == list(range(100))
    producer.close()

    async def aiokafka_send() -> int:
        aio = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, enable_idempotence=True)
        await aio.start()
        try:
            return (await aio.send_and_wait("both", b"aio", partition=0)).offset
        finally:
            await aio.stop()

    assert asyncio.run(aiokafka_send()) == 100
    with KafkaConnection.from_bootstrap(broker.bootstrap_servers) as conn:
        values = [value for _, value in read_values(conn, "both")]
    assert values == [b"kp-%d" % i for i in range(100)] + [b"aio"]
