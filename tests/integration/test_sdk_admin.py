"""flux.sdk against real broker processes: Admin, SimpleProducer / SimpleConsumer, retries."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from flux.protocol.api import ApiKey
from flux.protocol.partitioner import partition_for_key
from flux.sdk.admin import Admin
from flux.sdk.errors import (
    FluxConnectionError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaError,
    NotEnoughReplicasError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicError,
)
from flux.sdk.simple import SimpleConsumer, SimpleProducer

from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def admin(broker) -> Iterator[Admin]:
    with Admin(broker.bootstrap_servers, timeout_s=15.0) as client:
        yield client


def test_admin_round_trip(admin: Admin) -> None:
    created = admin.create_topic(
        "orders", partitions=3, replication_factor=1, configs={"retention.ms": "3600000"}
    )
    assert created.name == "orders"
    assert [p.partition for p in created.partitions] == [0, 1, 2]

    described = admin.describe_topic("orders")
    assert described.topic_id == created.topic_id and described.topic_id.int != 0
    assert not described.internal
    (broker_id,) = [broker.node_id for broker in admin.describe_cluster().brokers]
    for partition in described.partitions:
        assert partition.leader == broker_id
        assert partition.leader_epoch >= 0
        assert partition.replicas == [broker_id]
        assert partition.isr == [broker_id]
        assert partition.offline_replicas == []

    configs = admin.describe_configs("orders")
    retention = configs["retention.ms"]
    assert retention.value == "3600000" and not retention.is_default
    assert retention.source == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.bytes"].is_default

    assert "orders" in admin.list_topics()
    assert admin.list_topics() == sorted(admin.list_topics())

    admin.delete_topic("orders")
    # Deletion is committed by the controller; brokers' metadata follows shortly.
    wait_until(lambda: "orders" not in admin.list_topics(), timeout_s=10)
    with pytest.raises(UnknownTopicError, match="'orders' does not exist"):
        admin.describe_topic("orders")
    with pytest.raises(UnknownTopicError):
        admin.delete_topic("orders")


def test_validate_only_creates_nothing(admin: Admin) -> None:
    result = admin.create_topic("dry", partitions=2, validate_only=True)
    assert len(result.partitions) == 2
    assert "dry" not in admin.list_topics()


def test_describe_cluster(admin: Admin, broker) -> None:
    cluster = admin.describe_cluster()
    assert cluster.cluster_id
    assert cluster.controller_id in [b.node_id for b in cluster.brokers]
    assert [(b.host, b.port) for b in cluster.brokers] == [("127.0.0.1", broker.kafka_port)]


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"name": "bad/name"}, InvalidTopicError, "bad/name"),
        ({"name": "zero", "partitions": 0}, InvalidPartitionsError, "0"),
        ({"name": "cfg", "configs": {"no.such.key": "1"}}, InvalidConfigError, "no.such.key"),
        (
            {"name": "cfg2", "configs": {"retention.ms": "soon"}},
            InvalidConfigError,
            "retention.ms",
        ),
        ({"name": "wide", "replication_factor": 3}, InvalidReplicationFactorError, "3"),
    ],
)
def test_create_errors_are_typed(admin: Admin, kwargs, error, fragment) -> None:
    with pytest.raises(error) as caught:
        admin.create_topic(**kwargs)
    assert fragment in caught.value.message  # the broker's error_message, not just the code
    assert kwargs["name"] not in admin.list_topics()


def test_existing_topic(admin: Admin) -> None:
    admin.create_topic("twice", partitions=1)
    with pytest.raises(TopicAlreadyExistsError, match="already exists"):
        admin.create_topic("twice", partitions=1)


def test_offsets(admin: Admin, broker) -> None:
    admin.create_topic("offsets", partitions=2)
    assert admin.high_watermarks("offsets") == {0: 0, 1: 0}
    with SimpleProducer(broker.bootstrap_servers) as producer:
        producer.send_batch("offsets", 1, [(None, b"a"), (None, b"b"), (None, b"c")])
    assert admin.high_watermarks("offsets") == {0: 0, 1: 3}
    assert admin.earliest_offsets("offsets") == {0: 0, 1: 0}
    with Admin(broker.bootstrap_servers, timeout_s=1.0) as impatient:
        started = time.monotonic()
        with pytest.raises(UnknownTopicError):
            impatient.high_watermarks("no-such-topic")
        assert time.monotonic() - started < 3  # a missing topic is retried only briefly


def test_create_partitions(admin: Admin) -> None:
    assert admin.supports(ApiKey.CREATE_PARTITIONS)
    admin.create_topic("grow", partitions=1)
    admin.create_partitions("grow", 3)
    assert [p.partition for p in admin.describe_topic("grow").partitions] == [0, 1, 2]
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions("grow", 2)


def test_produce_and_consume_with_keys_and_headers(admin: Admin, broker) -> None:
    admin.create_topic("keyed", partitions=4)
    keys = [f"user-{n}".encode() for n in range(12)]
    with SimpleProducer(broker.bootstrap_servers) as producer:
        sent = [
            producer.send("keyed", b"v-" + key, key=key, headers={"trace": key, "empty": None})
            for key in keys
        ]
    for key, metadata in zip(keys, sent, strict=True):
        assert metadata.partition == partition_for_key(key, 4)
    with SimpleConsumer(broker.bootstrap_servers) as consumer:
        records = list(consumer.read_all("keyed"))
    assert sorted(r.key for r in records) == sorted(keys)
    for record in records:
        assert record.value == b"v-" + record.key
        assert record.headers == (("trace", record.key), ("empty", None))
        assert record.partition == partition_for_key(record.key, 4)
        assert (record.partition, record.offset) in {(m.partition, m.offset) for m in sent}


def test_keyless_records_go_round_robin(admin: Admin, broker) -> None:
    admin.create_topic("spread", partitions=3)
    with SimpleProducer(broker.bootstrap_servers) as producer:
        partitions = [producer.send("spread", b"x").partition for _ in range(6)]
    assert sorted(partitions) == [0, 0, 1, 1, 2, 2]


def test_consumer_reads_from_the_middle_of_a_batch(admin: Admin, broker) -> None:
    admin.create_topic("middle", partitions=1)
    with SimpleProducer(broker.bootstrap_servers) as producer:
        base = producer.send_batch("middle", 0, [(None, f"r{n}".encode()) for n in range(5)])
        producer.send("middle", b"r5", partition=0)
    assert base == 0
    with SimpleConsumer(broker.bootstrap_servers) as consumer:
        records = consumer.fetch("middle", 0, 3, max_wait_ms=0)
        assert [(r.offset, r.value) for r in records] == [(3, b"r3"), (4, b"r4"), (5, b"r5")]
        assert consumer.fetch("middle", 0, 6, max_wait_ms=0) == []
        with pytest.raises(OffsetOutOfRangeError):
            consumer.fetch("middle", 0, 100, max_wait_ms=0)


def test_produce_right_after_create(admin: Admin, broker) -> None:
    # The producer's first metadata may race the topic reaching the broker; the retry helper
    # covers it (UNKNOWN_TOPIC_OR_PARTITION / LEADER_NOT_AVAILABLE are retried briefly).
    with SimpleProducer(broker.bootstrap_servers, allow_auto_topic_creation=False) as producer:
        admin.create_topic("fresh", partitions=2)
        metadata = producer.send("fresh", b"first", partition=1)
    assert (metadata.partition, metadata.offset) == (1, 0)


def test_acks_zero(admin: Admin, broker) -> None:
    admin.create_topic("fire", partitions=1)
    with SimpleProducer(broker.bootstrap_servers, acks=0) as producer:
        assert producer.send("fire", b"and-forget").offset == -1
        # acks=0 gets no response; the next request on the same connection still pairs up.
        assert producer.client.partition_count("fire") == 1
    with SimpleConsumer(broker.bootstrap_servers) as consumer:
        wait_until(lambda: consumer.high_watermarks("fire") == {0: 1}, timeout_s=10)
        assert [r.value for r in consumer.read_all("fire")] == [b"and-forget"]


def test_unknown_topic_fails_fast_without_auto_create(broker) -> None:
    with SimpleProducer(
        broker.bootstrap_servers, allow_auto_topic_creation=False, timeout_s=1.5
    ) as producer:
        started = time.monotonic()
        with pytest.raises(UnknownTopicError):
            producer.send("never-created", b"x")
    assert time.monotonic() - started < 5


def test_non_routing_errors_are_not_retried(admin: Admin, broker) -> None:
    admin.create_topic("strict", partitions=1, configs={"min.insync.replicas": "2"})
    with SimpleProducer(broker.bootstrap_servers, acks=-1, timeout_s=20) as producer:
        started = time.monotonic()
        with pytest.raises(NotEnoughReplicasError) as caught:
            producer.send("strict", b"x")
    assert caught.value.retriable  # retriable per Kafka, yet raised at once: no idempotence
    assert time.monotonic() - started < 5


def test_broker_down_then_restarted(broker) -> None:
    bootstrap = broker.bootstrap_servers
    with Admin(bootstrap, timeout_s=15.0) as admin:
        admin.create_topic("durable", partitions=1)
    with SimpleProducer(bootstrap) as producer:
        producer.send("durable", b"before")

    broker.kill()
    for client in (Admin(bootstrap, timeout_s=2.0), SimpleProducer(bootstrap, timeout_s=2.0)):
        started = time.monotonic()
        with client, pytest.raises(FluxConnectionError) as caught:
            if isinstance(client, Admin):
                client.list_topics()
            else:
                client.send("durable", b"lost")
        assert time.monotonic() - started < 2.0 + 3.0
        assert bootstrap in str(caught.value)

    broker.start()
    broker.wait_ready()
    with SimpleProducer(broker.bootstrap_servers) as producer:
        assert producer.send("durable", b"after").offset == 1
    with SimpleConsumer(broker.bootstrap_servers) as consumer:
        assert [r.value for r in consumer.read_all("durable")] == [b"before", b"after"]


def test_open_connection_dies_mid_session(admin: Admin, broker) -> None:
    admin.create_topic("session", partitions=1)
    producer = SimpleProducer(broker.bootstrap_servers, timeout_s=2.0)
    try:
        producer.send("session", b"one")
        broker.kill()
        started = time.monotonic()
        with pytest.raises(FluxConnectionError, match="gave up after"):
            producer.send("session", b"two")
        assert time.monotonic() - started < 5
    finally:
        producer.close()


def test_kafka_errors_carry_code_and_message(admin: Admin) -> None:
    admin.create_topic("dup", partitions=1)
    with pytest.raises(KafkaError) as caught:
        admin.create_topic("dup", partitions=1)
    assert caught.value.code.name == "TOPIC_ALREADY_EXISTS"
    assert not caught.value.retriable


def _produce_across_failover(nodes) -> list:
    """Create ``ha`` (6 partitions, RF 3) and send b"before" to every partition through clients
    that know a single bootstrap broker; kill that broker; send b"after" to every partition.
    Returns the surviving nodes.

    The victim is a broker that is not the active controller: this tests the client, and
    controller failover is the cluster tests' business."""
    with Admin(nodes[0].bootstrap_servers, timeout_s=30) as probe:
        controller_id = probe.describe_cluster().controller_id
    victim = next(node for node in nodes if node.node_id != controller_id)
    bootstrap = victim.bootstrap_servers  # deliberately the only bootstrap address
    with (
        Admin(bootstrap, timeout_s=30) as admin,
        SimpleProducer(bootstrap, acks=-1, timeout_s=30) as producer,
    ):
        assert [b.node_id for b in admin.describe_cluster().brokers] == [1, 2, 3]
        created = admin.create_topic("ha", partitions=6, replication_factor=3)
        assert all(sorted(p.replicas) == [1, 2, 3] for p in created.partitions)
        assert len({p.leader for p in created.partitions}) > 1  # leaders are spread
        assert victim.node_id in {p.leader for p in created.partitions}

        for partition in range(6):
            assert producer.send("ha", b"before", partition=partition).offset == 0
        leaders = {producer.client.leader_for("ha", p).node_id for p in range(6)}
        assert leaders == {p.leader for p in created.partitions}

        victim.kill()
        # Metadata now comes from the other brokers; the victim's partitions get new leaders.
        for partition in range(6):
            assert producer.send("ha", b"after", partition=partition).offset >= 0
        assert all(producer.client.leader_for("ha", p).node_id != victim.node_id for p in range(6))
        assert "ha" in admin.list_topics()
        admin.create_topic("after-failover", partitions=1, replication_factor=2)
    return [node for node in nodes if node is not victim]


def test_cluster_routing_and_bootstrap_failover(cluster_factory) -> None:
    """Three nodes: requests reach each partition's leader and the controller; when the only
    bootstrap broker dies, metadata comes from the others and produce resumes on new leaders."""
    survivors = ",".join(
        node.bootstrap_servers for node in _produce_across_failover(cluster_factory(3))
    )
    with SimpleConsumer(survivors) as consumer:
        values = [(r.partition, r.value) for r in consumer.read_all("ha")]
    assert {partition for partition, value in values if value == b"after"} == set(range(6))


def test_acks_all_records_survive_leader_kill(cluster_factory) -> None:
    survivors = ",".join(
        node.bootstrap_servers for node in _produce_across_failover(cluster_factory(3))
    )
    with SimpleConsumer(survivors) as consumer:
        values = [(r.partition, r.value) for r in consumer.read_all("ha")]
    assert values == [(p, v) for p in range(6) for v in (b"before", b"after")]
