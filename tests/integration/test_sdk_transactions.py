"""The SDK's transactions on one shared 3-node cluster: commits and aborts across two topics
read back by SDK consumers (read_committed: only committed records; read_uncommitted:
everything that reached the log), consume-transform-produce with the consumed offsets in the
transaction, fencing by a second producer of the same id and by the transaction timeout, and
interoperability with confluent-kafka in both directions.

The tests use distinct topics, groups and transactional ids, so they share the module's
cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from flux.cluster.launcher import NodeProcess, local_cluster_configs
from flux.sdk import (
    Admin,
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    Producer,
    ProducerFencedError,
    TopicPartition,
)

from tests.conftest import FAST_FAILURE_DETECTION
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration

READ_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    extra = {section: dict(keys) for section, keys in FAST_FAILURE_DETECTION.items()}
    extra["broker"]["group_initial_rebalance_delay_ms"] = 0
    nodes = local_cluster_configs(Path(tmp_path_factory.mktemp("sdk-txn")), 3, extra=extra)
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


def _create(bootstrap: str, topics: dict[str, int]) -> None:
    with Admin(bootstrap) as admin:
        for topic, partitions in topics.items():
            admin.create_topic(topic, partitions=partitions, replication_factor=3)


def _read(bootstrap: str, topics: dict[str, int], isolation_level: str) -> list[bytes]:
    """Every value an SDK consumer with ``isolation_level`` reads from the partitions' starts
    to their ends as of now (the last stable offsets for read_committed)."""
    with Consumer(bootstrap, isolation_level=isolation_level, read_old=True) as consumer:
        partitions = [TopicPartition(t, p) for t, count in topics.items() for p in range(count)]
        consumer.assign(partitions)
        ends = {}
        for topic in topics:
            for partition, end in consumer.end_offsets(topic).items():
                ends[TopicPartition(topic, partition)] = end
        values: list[bytes] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, "the consumer did not reach the ends"
            values += [record.value for record in consumer.poll(timeout_s=0.5)]
        return values


def _confluent_read(bootstrap: str, topics: dict[str, int], isolation_level: str) -> list[bytes]:
    """The same with confluent-kafka: read until every partition reports its end."""
    from confluent_kafka import Consumer as ConfluentConsumer
    from confluent_kafka import TopicPartition as ConfluentPartition

    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"confluent-{isolation_level}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation_level,
            "enable.partition.eof": True,
        }
    )
    assignment = [ConfluentPartition(t, p, 0) for t, count in topics.items() for p in range(count)]
    consumer.assign(assignment)
    values: list[bytes] = []
    at_end: set[tuple[str, int]] = set()
    deadline = time.monotonic() + READ_TIMEOUT_S
    try:
        while len(at_end) < len(assignment):
            assert time.monotonic() < deadline, "confluent-kafka did not reach the ends"
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                if message.error() is not None:
                    assert message.error().code() == -191, message.error()  # _PARTITION_EOF
                    at_end.add((message.topic(), message.partition()))
                    continue
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_commit_and_abort_across_two_topics(bootstrap: str) -> None:
    topics = {"sdk-tx-a": 2, "sdk-tx-b": 1}
    _create(bootstrap, topics)
    delivered = []
    with Producer(bootstrap, transactional_id="sdk-app-1", linger_ms=2) as producer:
        producer.init_transactions()
        for round_, commit in enumerate([True, False, True, False, True]):
            tag = b"c" if commit else b"a"
            producer.begin_transaction()
            for i in range(30):
                value = b"r%d-%d-%s" % (round_, i, tag)
                delivered.append(producer.produce("sdk-tx-a", value, partition=i % 2))
                delivered.append(producer.produce("sdk-tx-b", b"b-" + value, partition=0))
            if commit:
                producer.commit_transaction()
            else:
                producer.flush()  # in the log first: an abort drops what was not sent
                producer.abort_transaction()
        # The context manager: aborted by an exception in the block, committed otherwise.
        with pytest.raises(RuntimeError, match="transform failed"):
            with producer.transaction():
                producer.send("sdk-tx-a", [b"cm-0-a", b"cm-1-a"])
                raise RuntimeError("transform failed")
        with producer.transaction():
            producer.send("sdk-tx-b", [b"cm-0-c", b"cm-1-c"])
    assert all(future.result().offset >= 0 for future in delivered)
    committed = _read(bootstrap, topics, "read_committed")
    assert Counter(value[-1:] for value in committed) == {b"c": 3 * 60 + 2}, committed
    assert len(set(committed)) == len(committed)  # each once
    everything = _read(bootstrap, topics, "read_uncommitted")
    assert Counter(value[-1:] for value in everything) == {b"c": 182, b"a": 122}


def test_the_async_api_and_the_lso(bootstrap: str) -> None:
    """``async with producer.transaction()``; a transaction still open holds read_committed
    readers back at its first record, and its records appear once it commits."""
    _create(bootstrap, {"sdk-tx-async": 1})

    async def scenario() -> None:
        async with AsyncProducer(bootstrap, transactional_id="sdk-async") as producer:
            await producer.init_transactions()
            async with producer.transaction():
                await producer.send("sdk-tx-async", [b"first", b"second"])
            with pytest.raises(KeyError):
                async with producer.transaction():
                    await producer.send("sdk-tx-async", b"dropped")
                    raise KeyError("no such order")
            await producer.begin_transaction()
            await producer.send("sdk-tx-async", b"pending")  # acknowledged, not committed
            async with AsyncConsumer(
                bootstrap, read_old=True, isolation_level="read_committed"
            ) as consumer:
                consumer.assign([("sdk-tx-async", 0)])
                seen = [record.value for record in await consumer.poll(timeout_s=2.0)]
                assert seen == [b"first", b"second"]
                assert await consumer.poll(timeout_s=1.0) == []  # held at the open one
                await producer.commit_transaction()
                seen = [record.value for record in await consumer.poll(timeout_s=5.0)]
                assert seen == [b"pending"]

    asyncio.run(scenario())


def _confluent_offset_for_time(bootstrap: str, topic: str, at_ms: int, isolation: str) -> int:
    """What confluent-kafka's ``offsets_for_times`` finds in partition 0 (-1: none)."""
    from confluent_kafka import Consumer as ConfluentConsumer
    from confluent_kafka import TopicPartition as ConfluentPartition

    consumer = ConfluentConsumer(
        {"bootstrap.servers": bootstrap, "group.id": "times", "isolation.level": isolation}
    )
    try:
        [found] = consumer.offsets_for_times([ConfluentPartition(topic, 0, at_ms)], timeout=10)
    finally:
        consumer.close()
    return int(found.offset)


def test_a_time_search_under_read_committed_stops_at_the_lso(bootstrap: str) -> None:
    """ListOffsets by timestamp never names an offset its reader cannot fetch yet: under
    read_committed not a record of a transaction still open (Kafka's lastFetchableOffset),
    under read_uncommitted everything below the high watermark."""
    topic = "sdk-tx-times"
    _create(bootstrap, {topic: 1})
    base = int(time.time() * 1000)
    with Producer(bootstrap, transactional_id="sdk-tx-times") as producer:
        producer.init_transactions()
        with producer.transaction():
            producer.produce(topic, b"committed", timestamp_ms=base).result(timeout=10)
        producer.begin_transaction()
        producer.produce(topic, b"open", timestamp_ms=base + 1000).result(timeout=10)
        later = base + 500  # only the open transaction's record is at or after it
        assert _confluent_offset_for_time(bootstrap, topic, later, "read_uncommitted") == 2
        assert _confluent_offset_for_time(bootstrap, topic, later, "read_committed") == -1
        assert _confluent_offset_for_time(bootstrap, topic, base, "read_committed") == 0
        producer.commit_transaction()
    assert _confluent_offset_for_time(bootstrap, topic, later, "read_committed") == 2


def test_consume_transform_produce(bootstrap: str) -> None:
    """Offsets sent in a transaction count only if it commits: an aborted round leaves the
    group's offsets (and the output) as they were, and is done again."""
    _create(bootstrap, {"sdk-ctp-in": 2, "sdk-ctp-out": 2})
    inputs = [b"order-%d" % i for i in range(40)]
    with Producer(bootstrap) as plain:
        plain.send("sdk-ctp-in", inputs)
    group = "sdk-ctp"
    consumer = Consumer(
        bootstrap,
        group_id=group,
        topics=["sdk-ctp-in"],
        read_old=True,
        isolation_level="read_committed",
        max_poll_records=15,
    )
    with (
        consumer,
        Producer(bootstrap, transactional_id="sdk-ctp-app") as producer,
        Admin(bootstrap) as admin,
    ):
        producer.init_transactions()
        processed = 0
        aborted_once = False
        committed: dict[tuple[str, int], int] = {}
        while processed < len(inputs):
            records = consumer.poll(timeout_s=2.0)
            if not records:
                continue
            producer.begin_transaction()
            for record in records:
                producer.produce("sdk-ctp-out", record.value.upper(), key=record.key)
            positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
            producer.send_offsets_to_transaction(positions, consumer.group_metadata())
            # Not visible while the transaction is open.
            assert admin.committed_offsets(group) == committed
            if not aborted_once:
                aborted_once = True
                producer.flush()
                producer.abort_transaction()
                assert admin.committed_offsets(group) == committed
                for tp in consumer.assignment():  # process the round again
                    consumer.seek(tp, committed.get(tp, 0))
                continue
            producer.commit_transaction()
            committed = {(tp.topic, tp.partition): offset for tp, offset in positions.items()}
            wanted = committed
            wait_until(lambda: admin.committed_offsets(group) == wanted, timeout_s=10)  # noqa: B023
            processed += len(records)
    assert sum(committed.values()) == len(inputs)
    output = _read(bootstrap, {"sdk-ctp-out": 2}, "read_committed")
    assert sorted(output) == sorted(value.upper() for value in inputs)  # each exactly once
    assert len(_read(bootstrap, {"sdk-ctp-out": 2}, "read_uncommitted")) > len(inputs)


def test_a_second_producer_with_the_same_id_fences_the_first(bootstrap: str) -> None:
    _create(bootstrap, {"sdk-fence": 2})
    zombie = Producer(bootstrap, transactional_id="sdk-shared", linger_ms=1)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send("sdk-fence", {"value": b"zombie-0", "partition": 0})
        with Producer(bootstrap, transactional_id="sdk-shared") as successor:
            successor.init_transactions()  # aborts the zombie's transaction, bumps the epoch
            with successor.transaction():
                successor.send("sdk-fence", {"value": b"successor", "partition": 0})
        # Partition 0 is in the zombie's transaction already (the leader refuses the old
        # epoch), partition 1 is not (the coordinator refuses to add it).
        again = zombie.produce("sdk-fence", b"zombie-1", partition=0)
        new = zombie.produce("sdk-fence", b"zombie-2", partition=1)
        with pytest.raises(ProducerFencedError):
            zombie.commit_transaction()
        assert isinstance(again.exception(timeout=10), ProducerFencedError)
        assert isinstance(new.exception(timeout=10), ProducerFencedError)
        for call in (zombie.begin_transaction, zombie.abort_transaction):
            with pytest.raises(ProducerFencedError):
                call()
        with pytest.raises(ProducerFencedError):
            zombie.produce("sdk-fence", b"zombie-3")
    finally:
        zombie.close()
    assert _read(bootstrap, {"sdk-fence": 2}, "read_committed") == [b"successor"]


def test_a_transaction_open_past_its_timeout_is_fenced(bootstrap: str) -> None:
    _create(bootstrap, {"sdk-slow": 1})
    with Producer(bootstrap, transactional_id="sdk-slow", transaction_timeout_ms=1500) as slow:
        slow.init_transactions()
        slow.begin_transaction()
        slow.send("sdk-slow", b"late")
        # The coordinator aborts it (epoch bumped): the abort marker lets the LSO pass.
        with Consumer(bootstrap, isolation_level="read_committed") as consumer:
            wait_until(lambda: consumer.end_offsets("sdk-slow") == {0: 2}, timeout_s=30)
        with pytest.raises(ProducerFencedError):
            slow.commit_transaction()
    assert _read(bootstrap, {"sdk-slow": 1}, "read_committed") == []
    assert _read(bootstrap, {"sdk-slow": 1}, "read_uncommitted") == [b"late"]


def test_sdk_transactions_read_by_confluent_kafka(bootstrap: str) -> None:
    topics = {"sdk-to-confluent": 3}
    _create(bootstrap, topics)
    with Producer(bootstrap, transactional_id="sdk-to-confluent") as producer:
        producer.init_transactions()
        for round_, commit in enumerate([True, False, True]):
            producer.begin_transaction()
            tag = b"c" if commit else b"a"
            producer.send(
                "sdk-to-confluent", [{"value": b"%d-%d-%s" % (round_, i, tag)} for i in range(20)]
            )
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    committed = _confluent_read(bootstrap, topics, "read_committed")
    assert Counter(value[-1:] for value in committed) == {b"c": 40}
    assert len(set(committed)) == 40
    everything = _confluent_read(bootstrap, topics, "read_uncommitted")
    assert Counter(value[-1:] for value in everything) == {b"c": 40, b"a": 20}


def test_confluent_kafka_transactions_read_by_the_sdk(bootstrap: str) -> None:
    from confluent_kafka import Producer as ConfluentProducer

    topics = {"confluent-to-sdk": 2}
    _create(bootstrap, topics)
    producer = ConfluentProducer(
        {"bootstrap.servers": bootstrap, "transactional.id": "confluent-app", "linger.ms": 1}
    )
    producer.init_transactions(30)
    for round_, commit in enumerate([True, False, True, False]):
        producer.begin_transaction()
        for i in range(25):
            tag = b"c" if commit else b"a"
            producer.produce(
                "confluent-to-sdk", value=b"%d-%d-%s" % (round_, i, tag), partition=i % 2
            )
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    # One more, left open: read_committed readers stop at its first records.
    producer.begin_transaction()
    producer.produce("confluent-to-sdk", value=b"open-c", partition=0)
    producer.flush(30)
    assert Counter(v[-1:] for v in _read(bootstrap, topics, "read_committed")) == {b"c": 50}
    assert Counter(v[-1:] for v in _read(bootstrap, topics, "read_uncommitted")) == {
        b"c": 51,
        b"a": 50,
    }
    producer.commit_transaction(30)
    committed = _read(bootstrap, topics, "read_committed")
    assert Counter(value[-1:] for value in committed) == {b"c": 51}
    assert b"open-c" in committed
