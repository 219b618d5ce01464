"""Transactions with unmodified aiokafka and kafka-python clients: aiokafka's transactional
producer commits (``async with producer.transaction()``) and aborts (an exception inside it, or
``abort_transaction``) across two partitions of two topics, and its ``read_committed`` consumer
sees each committed record once and no aborted one (``read_uncommitted`` sees all); an open
transaction holds its ListOffsets(read_committed) end back; aiokafka's
``send_offsets_to_transaction`` makes a group's offsets visible only when the transaction
commits; kafka-python's ``read_committed`` consumer skips the aborted transactions of
confluent-kafka, aiokafka and kafka-python producers interleaved on the same partitions; and
kafka-python's own transactional producer runs consume-transform-produce with its consumer's
group metadata (TxnOffsetCommit v3)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from tests.integration.cluster_helpers import create_topic
from tests.integration.test_transactions import _producer as _confluent_producer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

Partitions = dict[tuple[str, int], list[bytes]]


def _bootstrap(nodes) -> str:
    return ",".join(node.bootstrap_servers for node in nodes)


def _topics(nodes, **partitions: int) -> None:
    for name, count in partitions.items():
        name = name.replace("_", "-")
        assert create_topic(nodes[0], name, count, 3)["error_code"] == 0, name


def _within(call: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    """``call()`` for a client call with no timeout of its own (kafka-python's
    ``commit_transaction``, ``abort_transaction``, ``send_offsets_to_transaction``): run in a
    daemon thread, failing the test if it has not returned after ``timeout_s``."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # re-raised in the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"{call} still blocked after {timeout_s} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class _Loop:
    """One event loop kept across steps, so an aiokafka producer lives between the blocking
    calls of other clients; every step runs with a timeout."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()

    def __call__(self, coroutine: Coroutine[Any, Any, Any], timeout_s: float = 30.0) -> Any:
        return self._loop.run_until_complete(asyncio.wait_for(coroutine, timeout_s))

    def close(self) -> None:
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()


# -- readers ---------------------------------------------------------------------------------


async def _aio_read(
    bootstrap: str, topics: dict[str, int], isolation: str
) -> tuple[Partitions, dict[tuple[str, int], int]]:
    """Every value per partition that an aiokafka consumer with ``isolation`` reads from the
    start up to the end offsets ListOffsets answers it (the last stable offsets, for
    read_committed), and those end offsets."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level=isolation,
        request_timeout_ms=10_000,
    )
    await consumer.start()
    try:
        assignment = [TopicPartition(t, p) for t, count in topics.items() for p in range(count)]
        consumer.assign(assignment)
        await consumer.seek_to_beginning(*assignment)
        ends = await consumer.end_offsets(assignment)
        values: Partitions = defaultdict(list)
        while any([await consumer.position(tp) < ends[tp] for tp in assignment]):
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                values[(tp.topic, tp.partition)].extend(record.value for record in records)
        return dict(values), {(tp.topic, tp.partition): end for tp, end in ends.items()}
    finally:
        await consumer.stop()


def _kafka_python_read(
    bootstrap: str, topics: dict[str, int], isolation: str
) -> tuple[Partitions, dict[tuple[str, int], int]]:
    """As ``_aio_read``, with kafka-python's KafkaConsumer."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level=isolation,
        request_timeout_ms=10_000,
    )
    try:
        assignment = [TopicPartition(t, p) for t, count in topics.items() for p in range(count)]
        consumer.assign(assignment)
        consumer.seek_to_beginning(*assignment)
        ends = consumer.end_offsets(assignment, timeout_ms=10_000)
        values: Partitions = defaultdict(list)
        deadline = time.monotonic() + 30
        while any(consumer.position(tp, timeout_ms=10_000) < ends[tp] for tp in assignment):
            assert time.monotonic() < deadline, {tp: consumer.position(tp) for tp in assignment}
            for tp, records in consumer.poll(timeout_ms=500).items():
                values[(tp.topic, tp.partition)].extend(record.value for record in records)
        return dict(values), {(tp.topic, tp.partition): end for tp, end in ends.items()}
    finally:
        consumer.close(autocommit=False)


def _flags(values: Partitions) -> Counter[bytes]:
    """How many values end in each flag (``c`` committed, ``a`` aborted)."""
    return Counter(value[-1:] for per_partition in values.values() for value in per_partition)


# -- 1. aiokafka producer: commit, abort, read_committed / read_uncommitted ----------------------


def test_aiokafka_transactions_commit_and_abort_across_two_topics(cluster_factory) -> None:
    nodes = cluster_factory(3)
    bootstrap = _bootstrap(nodes)
    _topics(nodes, aio_a=2, aio_b=2)
    topics = {"aio-a": 2, "aio-b": 2}
    asyncio.run(asyncio.wait_for(_aiokafka_commit_and_abort(bootstrap, topics), 90))


class _Abort(Exception):
    """Raised inside ``producer.transaction()`` to abort it."""


async def _aiokafka_commit_and_abort(bootstrap: str, topics: dict[str, int]) -> None:
    from aiokafka import AIOKafkaProducer

    partitions = [(t, p) for t, count in topics.items() for p in range(count)]
    expected: Partitions = {tp: [] for tp in partitions}  # committed, in send order
    everything: list[bytes] = []

    async def send_round(producer: AIOKafkaProducer, round_: int, flag: bytes) -> None:
        futures = []
        for i in range(10):
            for topic, partition in partitions:
                value = b"r%d-%s-%d-%02d-%s" % (round_, topic.encode(), partition, i, flag)
                futures.append(await producer.send(topic, value, partition=partition))
                everything.append(value)
                if flag == b"c":
                    expected[(topic, partition)].append(value)
        # Every record in the log before the transaction ends: aiokafka drops the batches it
        # has not sent yet when it aborts.
        await asyncio.wait_for(asyncio.gather(*futures), 20)

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id="aio-txn-1",
        linger_ms=1,
        request_timeout_ms=10_000,
    )
    await producer.start()
    try:
        # 0: committed on leaving the context.
        async with producer.transaction():
            await send_round(producer, 0, b"c")
        # 1: aborted by an exception raised inside the context.
        with pytest.raises(_Abort):
            async with producer.transaction():
                await send_round(producer, 1, b"a")
                raise _Abort
        # 2: begin_transaction + commit_transaction.
        await producer.begin_transaction()
        await send_round(producer, 2, b"c")
        await producer.commit_transaction()
        # 3: begin_transaction + abort_transaction.
        await producer.begin_transaction()
        await send_round(producer, 3, b"a")
        await producer.abort_transaction()
        # 4: committed again.
        async with producer.transaction():
            await send_round(producer, 4, b"c")

        committed, stable_ends = await _aio_read(bootstrap, topics, "read_committed")
        assert committed == expected  # every committed record once, in order, no aborted one
        assert _flags(committed) == {b"c": 120}
        uncommitted, ends = await _aio_read(bootstrap, topics, "read_uncommitted")
        assert _flags(uncommitted) == {b"c": 120, b"a": 80}
        assert sorted(v for values in uncommitted.values() for v in values) == sorted(everything)
        # No transaction open: the last stable offsets are the high watermarks (10 records of
        # each of 5 rounds, and one marker per transaction, on each partition).
        assert stable_ends == ends == {tp: 5 * 10 + 5 for tp in partitions}

        # 5: left open with its records in the log, it holds read_committed readers back at
        # its first offset on every partition it wrote; they see what was committed before.
        await producer.begin_transaction()
        await send_round(producer, 5, b"c")
        held, held_ends = await _aio_read(bootstrap, topics, "read_committed")
        assert held == committed
        assert held_ends == stable_ends
        _, open_ends = await _aio_read(bootstrap, topics, "read_uncommitted")
        assert open_ends == {tp: end + 10 for tp, end in ends.items()}
        await producer.commit_transaction()
        after, _ = await _aio_read(bootstrap, topics, "read_committed")
        assert after == expected and _flags(after) == {b"c": 160}
    finally:
        await producer.stop()


# -- 2. aiokafka consume-transform-produce with send_offsets_to_transaction --------------------


def test_aiokafka_send_offsets_to_transaction(cluster_factory) -> None:
    nodes = cluster_factory(3)
    bootstrap = _bootstrap(nodes)
    _topics(nodes, ctp_in=2, ctp_out=2)
    asyncio.run(asyncio.wait_for(_aiokafka_consume_transform_produce(bootstrap), 90))


async def _aiokafka_consume_transform_produce(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    inputs = [TopicPartition("ctp-in", p) for p in range(2)]
    seed = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=10_000)
    await seed.start()
    try:
        for tp in inputs:
            for i in range(20):
                await seed.send("ctp-in", b"in-%d-%02d" % (tp.partition, i), partition=tp.partition)
        await seed.flush()
    finally:
        await seed.stop()

    group = "ctp-group"
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        request_timeout_ms=10_000,
    )
    # Joins nothing: it only asks the group coordinator for the committed offsets.
    checker = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id="ctp-app",
        linger_ms=1,
        request_timeout_ms=10_000,
    )
    await consumer.start()
    await checker.start()
    await producer.start()

    async def committed() -> dict[int, int | None]:
        return {tp.partition: await checker.committed(tp) for tp in inputs}

    async def consume(count: int) -> dict[TopicPartition, list[Any]]:
        """The next ``count`` records of each input partition."""
        taken: dict[TopicPartition, list[Any]] = {tp: [] for tp in inputs}
        for tp in inputs:
            while len(taken[tp]) < count:
                batches = await consumer.getmany(
                    tp, timeout_ms=500, max_records=count - len(taken[tp])
                )
                taken[tp].extend(batches.get(tp, []))
        assert all(len(records) == count for records in taken.values()), taken
        return taken

    async def transform(records: dict[TopicPartition, list[Any]]) -> dict[TopicPartition, int]:
        futures = [
            await producer.send("ctp-out", b"out-" + record.value, partition=tp.partition)
            for tp, batch in records.items()
            for record in batch
        ]
        await asyncio.wait_for(asyncio.gather(*futures), 20)
        offsets = {tp: batch[-1].offset + 1 for tp, batch in records.items()}
        await producer.send_offsets_to_transaction(offsets, group)
        return offsets

    try:
        consumer.assign(inputs)
        assert await committed() == {0: None, 1: None}
        # The first half, committed: the offsets appear with the commit, not before.
        async with producer.transaction():
            assert await transform(await consume(10)) == {tp: 10 for tp in inputs}
            assert await committed() == {0: None, 1: None}
        assert await committed() == {0: 10, 1: 10}
        # The second half, aborted: the offsets stay where they were ...
        second = await consume(10)
        await producer.begin_transaction()
        assert await transform(second) == {tp: 20 for tp in inputs}
        await producer.abort_transaction()
        assert await committed() == {0: 10, 1: 10}
        # ... and the application rewinds to them and processes the half again.
        for tp in inputs:
            consumer.seek(tp, await consumer.committed(tp))
        async with producer.transaction():
            assert await transform(await consume(10)) == {tp: 20 for tp in inputs}
        assert await committed() == {0: 20, 1: 20}
    finally:
        await producer.stop()
        await checker.stop()
        await consumer.stop()

    output, _ = await _aio_read(bootstrap, {"ctp-out": 2}, "read_committed")
    assert output == {
        ("ctp-out", p): [b"out-in-%d-%02d" % (p, i) for i in range(20)] for p in range(2)
    }
    everything, _ = await _aio_read(bootstrap, {"ctp-out": 2}, "read_uncommitted")
    assert sum(len(values) for values in everything.values()) == 60  # the aborted half too


# -- 3. kafka-python: read_committed over every client's transactions; its own producer -------


def _kafka_python_producer(bootstrap: str, transactional_id: str):
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        linger_ms=1,
        max_block_ms=30_000,
        request_timeout_ms=10_000,
    )
    producer.init_transactions()  # bounded by max_block_ms
    return producer


def test_kafka_python_reads_committed_records_of_every_client(cluster_factory) -> None:
    """Transactions of confluent-kafka, aiokafka and kafka-python interleave on two partitions:
    records of one written while another's transaction is open, aborts landing after other
    producers' commits. kafka-python's read_committed consumer returns exactly the committed
    records, in order; its read_uncommitted consumer all of them."""
    from aiokafka import AIOKafkaProducer

    nodes = cluster_factory(3)
    bootstrap = _bootstrap(nodes)
    _topics(nodes, mixed=2)
    expected: Partitions = {("mixed", 0): [], ("mixed", 1): []}
    written: list[bytes] = []

    def values(writer: str, round_: int, flag: bytes) -> list[tuple[int, bytes]]:
        batch = [
            (p, b"%s-%d-%d-%02d-%s" % (writer.encode(), round_, p, i, flag))
            for i in range(5)
            for p in range(2)
        ]
        for partition, value in batch:
            written.append(value)
            if flag == b"c":
                expected[("mixed", partition)].append(value)
        return batch

    def confluent_send(producer, batch: list[tuple[int, bytes]]) -> None:
        producer.begin_transaction()
        for partition, value in batch:
            producer.produce("mixed", value=value, partition=partition)
        assert producer.flush(30) == 0  # in the log (an abort purges what was not sent)

    def kafka_python_send(producer, batch: list[tuple[int, bytes]]) -> None:
        producer.begin_transaction()
        futures = [producer.send("mixed", value, partition=p) for p, value in batch]
        producer.flush(timeout=30)
        for future in futures:
            future.get(timeout=30)

    async def aio_send(producer: AIOKafkaProducer, batch: list[tuple[int, bytes]]) -> None:
        await producer.begin_transaction()
        futures = [await producer.send("mixed", value, partition=p) for p, value in batch]
        await asyncio.gather(*futures)

    async def aio_producer() -> AIOKafkaProducer:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id="mixed-aiokafka", linger_ms=1
        )
        await producer.start()
        return producer

    loop = _Loop()
    confluent = _confluent_producer(bootstrap, "mixed-confluent")
    kafka_python = _kafka_python_producer(bootstrap, "mixed-kafka-python")
    aio = loop(aio_producer())
    try:
        confluent_send(confluent, values("cf", 0, b"c"))
        confluent.commit_transaction(30)
        confluent_send(confluent, values("cf", 1, b"a"))  # open until below
        kafka_python_send(kafka_python, values("kp", 0, b"c"))
        _within(kafka_python.commit_transaction)
        loop(aio_send(aio, values("aio", 0, b"a")))  # open until below
        confluent.abort_transaction(30)
        kafka_python_send(kafka_python, values("kp", 1, b"a"))
        loop(aio.abort_transaction())
        _within(kafka_python.abort_transaction)
        loop(aio_send(aio, values("aio", 1, b"c")))
        confluent_send(confluent, values("cf", 2, b"c"))
        loop(aio.commit_transaction())
        confluent.commit_transaction(30)
    finally:
        confluent.flush(10)
        _within(lambda: kafka_python.close(timeout=10))
        loop(aio.stop())
        loop.close()

    committed, stable_ends = _kafka_python_read(bootstrap, {"mixed": 2}, "read_committed")
    assert committed == expected, committed
    assert _flags(committed) == {b"c": 40}
    everything, ends = _kafka_python_read(bootstrap, {"mixed": 2}, "read_uncommitted")
    assert _flags(everything) == {b"c": 40, b"a": 30}
    assert sorted(v for vs in everything.values() for v in vs) == sorted(written)
    # 35 records and 7 markers per partition; nothing open, so the stable end is the end.
    assert stable_ends == ends == {("mixed", 0): 42, ("mixed", 1): 42}


def test_kafka_python_transactional_consume_transform_produce(cluster_factory) -> None:
    """kafka-python's transactional producer with a subscribed consumer's group metadata
    (generation and member id, TxnOffsetCommit v3): the group's offsets move with a commit,
    not with an abort, and the output holds each input's result once."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    nodes = cluster_factory(3)
    bootstrap = _bootstrap(nodes)
    _topics(nodes, kp_in=2, kp_out=2)
    seed = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_block_ms=30_000)
    for partition in range(2):
        for i in range(20):
            seed.send("kp-in", b"in-%d-%02d" % (partition, i), partition=partition)
    seed.flush(timeout=30)
    seed.close(timeout=10)

    group = "kp-app"
    inputs = [TopicPartition("kp-in", p) for p in range(2)]
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_poll_records=10,
        request_timeout_ms=10_000,
    )
    checker = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    producer = _kafka_python_producer(bootstrap, "kp-app-1")

    def committed() -> dict[int, int | None]:
        return {tp.partition: checker.committed(tp, timeout_ms=10_000) for tp in inputs}

    def consume(count: int) -> dict[Any, list[Any]]:
        """The next ``count`` records of each input partition."""
        taken: dict[Any, list[Any]] = {tp: [] for tp in inputs}
        deadline = time.monotonic() + 30
        while any(len(records) < count for records in taken.values()):
            assert time.monotonic() < deadline, {tp: len(r) for tp, r in taken.items()}
            for tp, records in consumer.poll(timeout_ms=500).items():
                taken[tp].extend(records)
                if len(taken[tp]) > count:  # fetched past what this step takes: rewind
                    consumer.seek(tp, taken[tp][count].offset)
                    del taken[tp][count:]
        assert all(len(records) == count for records in taken.values()), taken
        return taken

    def transform(records: dict[Any, list[Any]]) -> dict[Any, int]:
        producer.begin_transaction()
        futures = [
            producer.send("kp-out", b"out-" + record.value, partition=tp.partition)
            for tp, batch in records.items()
            for record in batch
        ]
        producer.flush(timeout=30)
        for future in futures:
            future.get(timeout=30)
        offsets = {tp: batch[-1].offset + 1 for tp, batch in records.items()}
        metadata = consumer.group_metadata()
        assert metadata.generation_id > 0 and metadata.member_id, metadata
        _within(
            lambda: producer.send_offsets_to_transaction(
                {tp: OffsetAndMetadata(offset, "", -1) for tp, offset in offsets.items()},
                metadata,
            )
        )
        return offsets

    try:
        consumer.subscribe(["kp-in"])
        assert committed() == {0: None, 1: None}
        first = consume(10)  # joins the group on the way
        assert set(consumer.assignment()) == set(inputs)
        assert transform(first) == {tp: 10 for tp in inputs}
        assert committed() == {0: None, 1: None}  # pending until the commit
        _within(producer.commit_transaction)
        assert committed() == {0: 10, 1: 10}
        assert transform(consume(10)) == {tp: 20 for tp in inputs}
        _within(producer.abort_transaction)
        assert committed() == {0: 10, 1: 10}
        for tp in inputs:  # rewind to the committed offsets and process the half again
            consumer.seek(tp, consumer.committed(tp, timeout_ms=10_000))
        assert transform(consume(10)) == {tp: 20 for tp in inputs}
        _within(producer.commit_transaction)
        assert committed() == {0: 20, 1: 20}
    finally:
        _within(lambda: producer.close(timeout=10))
        _within(lambda: consumer.close(autocommit=False))
        _within(lambda: checker.close(autocommit=False))

    output, _ = _kafka_python_read(bootstrap, {"kp-out": 2}, "read_committed")
    assert output == {
        ("kp-out", p): [b"out-in-%d-%02d" % (p, i) for i in range(20)] for p in range(2)
    }
    everything, _ = _kafka_python_read(bootstrap, {"kp-out": 2}, "read_uncommitted")
    assert sum(len(values) for values in everything.values()) == 60  # the aborted half too
