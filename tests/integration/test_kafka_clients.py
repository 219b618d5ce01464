"""Unmodified Kafka clients against one Flux broker: admin create, keyed produce with headers
and every compression codec, and a full read back from the beginning."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.integration.clients import (
    CODECS,
    PARTITIONS,
    Message,
    Received,
    check_received,
    workload,
)

pytestmark = pytest.mark.integration

DEADLINE_S = 60.0


def _topic() -> str:
    return f"clients-{uuid.uuid4().hex[:8]}"


def _group(messages: list[Message]) -> dict[str, list[Message]]:
    groups: dict[str, list[Message]] = {codec: [] for codec in CODECS}
    for message in messages:
        groups[message.codec].append(message)
    return groups


def test_confluent_kafka(broker) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = broker.bootstrap_servers
    topic = _topic()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)]
    )
    futures[topic].result(timeout=30)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == PARTITIONS

    messages = workload()
    errors: list[object] = []
    for codec, group in _group(messages).items():
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": 1,
                "partitioner": "murmur2_random",
                "compression.type": codec,
                "enable.idempotence": False,
                "linger.ms": 5,
            }
        )
        for message in group:
            producer.produce(
                topic,
                key=message.key,
                value=message.value,
                headers=list(message.headers) or None,
                on_delivery=lambda error, _msg: errors.append(error) if error else None,
            )
            producer.poll(0)
        assert producer.flush(30) == 0
        assert errors == []

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    received: list[Received] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(received) < len(messages) and time.monotonic() < deadline:
            for record in consumer.consume(num_messages=1000, timeout=1.0):
                assert record.error() is None, record.error()
                received.append(
                    Received(
                        record.partition(),
                        record.offset(),
                        record.key(),
                        record.value(),
                        tuple(record.headers() or ()),
                    )
                )
    finally:
        consumer.close()
    check_received(messages, received)


def test_kafka_python(broker) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    bootstrap = broker.bootstrap_servers
    topic = _topic()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
        assert topic in admin.list_topics()
    finally:
        admin.close()

    messages = workload()
    for codec, group in _group(messages).items():
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks=1,
            enable_idempotence=False,
            compression_type=None if codec == "none" else codec,
            linger_ms=5,
        )
        try:
            futures = [
                producer.send(topic, key=m.key, value=m.value, headers=list(m.headers))
                for m in group
            ]
            producer.flush(timeout=30)
            for future in futures:
                future.get(timeout=30)
        finally:
            producer.close()

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    received: list[Received] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(received) < len(messages) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000, max_records=2000).values():
                received.extend(
                    Received(r.partition, r.offset, r.key, r.value, tuple(r.headers))
                    for r in records
                )
    finally:
        consumer.close()
    check_received(messages, received)


def test_aiokafka(broker) -> None:
    asyncio.run(_aiokafka(broker.bootstrap_servers))


async def _aiokafka(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = _topic()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)]
        )
        assert topic in await admin.list_topics()
    finally:
        await admin.close()

    messages = workload()
    for codec, group in _group(messages).items():
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks=1,
            compression_type=None if codec == "none" else codec,
            linger_ms=5,
        )
        await producer.start()
        try:
            futures = [
                await producer.send(topic, key=m.key, value=m.value, headers=list(m.headers))
                for m in group
            ]
            await producer.flush()
            for future in futures:
                await future
        finally:
            await producer.stop()

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
    )
    await consumer.start()
    received: list[Received] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < len(messages) and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000, max_records=2000)
            for records in batches.values():
                received.extend(
                    Received(r.partition, r.offset, r.key, r.value, tuple(r.headers))
                    for r in records
                )
    finally:
        await consumer.stop()
    check_received(messages, received)
