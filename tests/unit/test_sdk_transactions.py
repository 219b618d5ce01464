"""The SDK's transactions without a cluster: the read_committed filter over literal record
batches (and a property over random interleavings of transactions), the transactional
producer's state machine and request bodies, and the producer against a scripted in-process
fake broker (retries, coalesced AddPartitionsToTxn, the batches it writes, abort, fencing)."""

from __future__ import annotations

import asyncio
import struct
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from flux.protocol.api import ApiKey, RequestHeader, decode_request, encode_request
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch, iter_batches
from flux.sdk import (
    AsyncConsumer,
    AsyncProducer,
    ConfigurationError,
    ConsumerGroupMetadata,
    Producer,
    ProducerFencedError,
    TopicPartition,
    TransactionAbortedError,
    TransactionAbortRequiredError,
    TransactionStateError,
)
from flux.sdk.errors import (
    AuthorizationError,
    FluxTimeoutError,
    KafkaError,
    ProducerStateError,
    TransactionError,
    UnknownTopicError,
    error_for,
)
from flux.sdk.messages import AbortedTransaction, committed_batches, decode_fetched
from flux.sdk.metadata import RetryPolicy
from flux.sdk.transactions import (
    TransactionManager,
    TxnPhase,
    add_partitions_body,
    as_group_metadata,
    normalize_offsets,
    read_add_partitions,
    read_txn_offset_commit,
    txn_offset_commit_body,
)
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_sdk_routing import FakeBroker

# -- building logs ------------------------------------------------------------------------------

_CONTROL_KEY = struct.Struct(">hh")
ABORT, COMMIT = 0, 1


class LogBuilder:
    """Batches laid end to end as a leader's log holds them, offsets assigned in order."""

    def __init__(self, base_offset: int = 0) -> None:
        self.next_offset = base_offset
        self.data = bytearray()

    def data_batch(self, producer_id: int, count: int = 1, *, transactional: bool = True) -> int:
        """Records whose values name their offsets; returns the first offset."""
        first = self.next_offset
        records = [(None, b"v%d" % (first + i), ()) for i in range(count)]
        self.data += build_batch(
            records,
            base_offset=first,
            producer_id=producer_id,
            producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=0 if producer_id >= 0 else -1,
            is_transactional=transactional,
        )
        self.next_offset += count
        return first

    def marker(self, producer_id: int, kind: int) -> int:
        offset = self.next_offset
        self.data += build_batch(
            [(_CONTROL_KEY.pack(0, kind), struct.pack(">hi", 0, 0), ())],
            base_offset=offset,
            producer_id=producer_id,
            producer_epoch=0,
            is_transactional=True,
            is_control=True,
        )
        self.next_offset += 1
        return offset


def _offsets(data: bytes, aborted: list[AbortedTransaction] | None, start: int = 0) -> list[int]:
    return [record.offset for record in decode_fetched(bytes(data), "t", 0, start, aborted)]


# -- the read_committed filter -----------------------------------------------------------------


def test_aborted_records_are_dropped_up_to_the_abort_marker() -> None:
    log = LogBuilder()
    log.data_batch(1, 3)  # 0-2: aborted
    log.marker(1, ABORT)  # 3
    log.data_batch(2, 2)  # 4-5: committed
    log.marker(2, COMMIT)  # 6
    log.data_batch(-1, transactional=False)  # 7: plain
    log.data_batch(1, 2)  # 8-9: producer 1 again, committed this time
    log.marker(1, COMMIT)  # 10
    aborted = [AbortedTransaction(producer_id=1, first_offset=0)]
    assert _offsets(log.data, aborted) == [4, 5, 7, 8, 9]
    # read_uncommitted: everything but the markers.
    assert _offsets(log.data, None) == [0, 1, 2, 4, 5, 7, 8, 9]
    # read_committed with nothing aborted: only the markers go.
    assert _offsets(log.data, []) == [0, 1, 2, 4, 5, 7, 8, 9]


def test_interleaved_transactions_of_two_producers() -> None:
    log = LogBuilder()
    log.data_batch(1)  # 0: aborted
    log.data_batch(2)  # 1: committed
    log.data_batch(1)  # 2: aborted
    log.marker(1, ABORT)  # 3
    log.data_batch(2)  # 4: committed
    log.marker(2, COMMIT)  # 5
    assert _offsets(log.data, [AbortedTransaction(1, 0)]) == [1, 4]


def test_an_aborted_entry_counts_only_from_its_first_offset() -> None:
    """Producer 1 aborts, commits, aborts: its committed transaction between the two aborted
    ones is kept, because the second entry becomes active only at its first offset."""
    log = LogBuilder()
    log.data_batch(1)  # 0: aborted
    log.marker(1, ABORT)  # 1
    log.data_batch(1)  # 2: committed
    log.marker(1, COMMIT)  # 3
    log.data_batch(1)  # 4: aborted
    log.marker(1, ABORT)  # 5
    aborted = [AbortedTransaction(1, 4), AbortedTransaction(1, 0)]  # any order
    assert _offsets(log.data, aborted) == [2]


def test_a_fetch_that_starts_inside_an_aborted_transaction() -> None:
    log = LogBuilder(base_offset=100)
    log.data_batch(7, 2)  # 100-101
    log.data_batch(7, 2)  # 102-103
    log.marker(7, ABORT)  # 104
    log.data_batch(8)  # 105
    log.marker(8, COMMIT)  # 106
    # The broker lists the transaction (first offset 100) for a fetch from 102.
    fetched = bytes(log.data)
    first, _ = next(iter_batches(fetched))
    tail = fetched[first.size :]
    assert _offsets(tail, [AbortedTransaction(7, 100)], start=102) == [105]


def test_non_transactional_batches_of_an_aborting_producer_are_kept() -> None:
    log = LogBuilder()
    log.data_batch(1)  # 0: transactional, aborted
    log.data_batch(1, transactional=False)  # 1: idempotent, not in the transaction
    log.marker(1, ABORT)  # 2
    assert _offsets(log.data, [AbortedTransaction(1, 0)]) == [1]


def test_committed_batches_yields_data_batches_only() -> None:
    log = LogBuilder()
    log.data_batch(3)
    log.marker(3, COMMIT)
    kept = list(committed_batches(iter_batches(bytes(log.data)), []))
    assert [(header.base_offset, header.is_control) for header, _ in kept] == [(0, False)]


@st.composite
def _histories(draw: st.DrawFn) -> tuple[bytes, list[AbortedTransaction], list[int]]:
    """A random interleaving of transactions of three producers and plain batches: the log,
    the aborted transactions a broker lists for it, and the offsets read_committed keeps."""
    log = LogBuilder()
    open_first: dict[int, int] = {}
    open_offsets: dict[int, list[int]] = {}
    aborted: list[AbortedTransaction] = []
    kept: list[int] = []
    steps = draw(
        st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.integers(1, 3)), max_size=30)
    )
    for producer_id, flag, count in steps:
        if producer_id == 0:
            first = log.data_batch(-1, count, transactional=False)
            kept += range(first, first + count)
        elif producer_id in open_first and flag:
            committed = draw(st.booleans())
            log.marker(producer_id, COMMIT if committed else ABORT)
            if committed:
                kept += open_offsets[producer_id]
            else:
                aborted.append(AbortedTransaction(producer_id, open_first[producer_id]))
            del open_first[producer_id], open_offsets[producer_id]
        else:
            first = log.data_batch(producer_id, count)
            open_first.setdefault(producer_id, first)
            open_offsets.setdefault(producer_id, []).extend(range(first, first + count))
    for producer_id in sorted(open_first):  # the LSO: every transaction ended before a read
        log.marker(producer_id, ABORT)
        aborted.append(AbortedTransaction(producer_id, open_first[producer_id]))
    shuffled = draw(st.permutations(aborted))
    return bytes(log.data), list(shuffled), sorted(kept)


@given(_histories())
def test_read_committed_returns_exactly_the_committed_records(
    history: tuple[bytes, list[AbortedTransaction], list[int]],
) -> None:
    data, aborted, kept = history
    assert _offsets(data, aborted) == kept


# -- the state machine -------------------------------------------------------------------------


def _ready() -> TransactionManager:
    txn = TransactionManager("app", 60_000)
    txn.initialized(producer_id=7, producer_epoch=0)
    return txn


def test_calls_out_of_order_raise_transaction_state_error() -> None:
    txn = TransactionManager("app", 60_000)
    for check in (txn.check_begin, txn.check_send, txn.check_offsets, txn.begin_commit):
        with pytest.raises(TransactionStateError, match="init_transactions"):
            check()
    txn.initialized(7, 0)
    with pytest.raises(TransactionStateError, match="already initialized"):
        txn.check_init()
    with pytest.raises(TransactionStateError, match="begin_transaction"):
        txn.check_send()
    with pytest.raises(TransactionStateError, match="no transaction"):
        txn.begin_commit()
    with pytest.raises(TransactionStateError, match="no transaction"):
        txn.begin_abort()
    txn.begin()
    with pytest.raises(TransactionStateError, match="already running"):
        txn.begin()
    txn.check_send()
    txn.check_offsets()


def test_commit_and_abort_return_to_ready() -> None:
    txn = _ready()
    for end in (txn.begin_commit, txn.begin_abort):
        txn.begin()
        txn.added([("a", 0), ("b", 1)])
        assert txn.started and txn.partitions == {("a", 0), ("b", 1)}
        end()
        txn.completed()
        assert txn.phase is TxnPhase.READY
        assert not txn.started and not txn.partitions
    txn.begin()
    txn.offsets_added()
    assert txn.started and not txn.partitions


def test_a_failed_record_makes_the_transaction_abortable() -> None:
    txn = _ready()
    txn.begin()
    cause = FluxTimeoutError("request timed out")
    assert txn.fail(cause, unknown_outcome=True) is cause
    assert txn.phase is TxnPhase.ABORTABLE_ERROR and txn.epoch_bump_needed
    for check in (txn.check_send, txn.check_offsets, txn.begin_commit):
        with pytest.raises(TransactionAbortRequiredError) as caught:
            check()
        assert caught.value.__cause__ is cause
    assert not txn.may_send_batch()
    txn.begin_abort()
    txn.bumped(7, 1)
    txn.completed()
    assert (txn.phase, txn.producer_epoch, txn.epoch_bump_needed) == (TxnPhase.READY, 1, False)


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH])
def test_fencing_is_fatal_and_raised_by_every_later_call(code: ErrorCode) -> None:
    txn = _ready()
    txn.begin()
    failure = txn.fail(error_for(code, "fenced"))
    assert isinstance(failure, ProducerFencedError) and failure.code is code
    assert txn.phase is TxnPhase.FATAL_ERROR and txn.fatal_error is failure
    raised = []
    for check in (txn.check_send, txn.begin_commit, txn.begin_abort, txn.check_begin):
        with pytest.raises(ProducerFencedError) as caught:
            check()
        raised.append(caught.value)
    assert len({id(error) for error in raised}) == len(raised)  # fresh copies each time
    # Later failures do not replace the first fatal error.
    txn.fail(error_for(ErrorCode.INVALID_TXN_STATE))
    assert txn.fatal_error is failure


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, AuthorizationError),
        (ErrorCode.INVALID_TXN_STATE, TransactionError),
    ],
)
def test_other_fatal_errors(code: ErrorCode, cls: type[KafkaError]) -> None:
    txn = _ready()
    txn.begin()
    failure = txn.fail(error_for(code))
    assert type(failure) is cls
    with pytest.raises(cls):
        txn.check_send()


def test_a_commit_of_unknown_outcome_may_only_be_retried() -> None:
    txn = _ready()
    txn.begin()
    txn.begin_commit()
    # EndTxn timed out: the phase stays COMMITTING; only commit may be called again.
    with pytest.raises(TransactionStateError, match=r"call commit_transaction\(\) again"):
        txn.begin_abort()
    with pytest.raises(TransactionStateError, match="begin_transaction"):
        txn.check_send()
    txn.begin_commit()
    txn.completed()
    txn.begin()
    txn.begin_abort()
    with pytest.raises(TransactionStateError, match=r"call abort_transaction\(\) again"):
        txn.begin_commit()


def test_error_classes_of_the_transaction_codes() -> None:
    assert type(error_for(ErrorCode.PRODUCER_FENCED)) is ProducerFencedError
    assert issubclass(ProducerFencedError, ProducerStateError)
    assert type(error_for(ErrorCode.CONCURRENT_TRANSACTIONS)) is TransactionError
    assert error_for(ErrorCode.CONCURRENT_TRANSACTIONS).retriable is True
    assert type(error_for(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)) is AuthorizationError


# -- bodies, readers, arguments ------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions_body_encodes_in_every_client_version(version: int) -> None:
    body = add_partitions_body("app", 7, 2, [("b", 1), ("a", 2), ("a", 0), ("a", 2)])
    assert body["v3_and_below_topics"] == [
        {"name": "a", "partitions": [0, 2]},
        {"name": "b", "partitions": [1]},
    ]
    frame = encode_request(ApiKey.ADD_PARTITIONS_TO_TXN, version, 1, "c", body)
    _, decoded = decode_request(frame[4:])
    assert decoded["v3_and_below_topics"] == body["v3_and_below_topics"]
    assert decoded["v3_and_below_producer_epoch"] == 2


def _add_partitions_answer(codes: dict[tuple[str, int], ErrorCode]) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), code in codes.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": index, "partition_error_code": code}
        )
    return {
        "results_by_topic_v3_and_below": [
            {"name": topic, "results_by_partition": results} for topic, results in by_topic.items()
        ]
    }


def test_read_add_partitions_raises_the_decisive_error() -> None:
    read_add_partitions(_add_partitions_answer({("a", 0): ErrorCode.NONE}), 3)
    answer = _add_partitions_answer(
        {
            ("a", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
            ("b", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
    )
    with pytest.raises(UnknownTopicError, match="b-0"):
        read_add_partitions(answer, 3)
    fenced = _add_partitions_answer(
        {("a", 0): ErrorCode.CONCURRENT_TRANSACTIONS, ("a", 1): ErrorCode.PRODUCER_FENCED}
    )
    with pytest.raises(ProducerFencedError):
        read_add_partitions(fenced, 3)


def test_txn_offset_commit_body_and_reader() -> None:
    group = ConsumerGroupMetadata("billing", generation_id=4, member_id="m-1")
    body = txn_offset_commit_body("app", group, 7, 1, {("in", 1): 10, ("in", 0): 5})
    assert (body["generation_id"], body["member_id"], body["group_id"]) == (4, "m-1", "billing")
    assert [p["partition_index"] for p in body["topics"][0]["partitions"]] == [0, 1]
    for version in range(4):
        encode_request(ApiKey.TXN_OFFSET_COMMIT, version, 1, "c", body)
    answer = {
        "topics": [
            {
                "name": "in",
                "partitions": [
                    {"partition_index": 0, "error_code": 0},
                    {"partition_index": 1, "error_code": ErrorCode.ILLEGAL_GENERATION},
                ],
            }
        ]
    }
    with pytest.raises(KafkaError, match="in-1") as caught:
        read_txn_offset_commit(answer, 3)
    assert caught.value.code is ErrorCode.ILLEGAL_GENERATION


class _ConfluentLikePartition:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset


def test_offsets_in_every_accepted_form() -> None:
    expected = {("a", 0): 5, ("b", 2): 7}
    assert normalize_offsets({("a", 0): 5, TopicPartition("b", 2): 7}) == expected
    assert normalize_offsets([("a", 0, 5), ("b", 2, 7)]) == expected
    assert normalize_offsets([_ConfluentLikePartition("a", 0, 5), ("b", 2, 7)]) == expected
    for bad in ({("a", 0): -1}, [("a", 0)], "a", {"a": 1}, [("", 0, 1)], 5):
        with pytest.raises(ConfigurationError):
            normalize_offsets(bad)
    assert as_group_metadata("g") == ConsumerGroupMetadata("g", -1, "", None)
    with pytest.raises(ConfigurationError):
        as_group_metadata("")


def test_settings_are_checked_at_construction() -> None:
    nobody = "127.0.0.1:1"
    with pytest.raises(ConfigurationError, match="acks"):
        AsyncProducer(nobody, transactional_id="app", acks=1)
    with pytest.raises(ConfigurationError, match="idempotent"):
        AsyncProducer(nobody, transactional_id="app", idempotent=False)
    with pytest.raises(ConfigurationError, match="transactional_id"):
        AsyncProducer(nobody, transactional_id="")
    with pytest.raises(ConfigurationError, match="transaction_timeout_ms"):
        AsyncProducer(nobody, transactional_id="app", transaction_timeout_ms=900_001)
    assert AsyncProducer(nobody, transactional_id="app").idempotent is True
    with pytest.raises(ConfigurationError, match="isolation_level"):
        AsyncConsumer(nobody, isolation_level="committed")
    assert AsyncConsumer(nobody, isolation_level="read_committed").isolation_level == (
        "read_committed"
    )


def test_transactional_calls_need_a_transactional_producer_and_a_transaction() -> None:
    async def scenario() -> None:
        plain = AsyncProducer("127.0.0.1:1")
        with pytest.raises(TransactionStateError, match="transactional_id"):
            await plain.begin_transaction()
        producer = AsyncProducer("127.0.0.1:1", transactional_id="app")
        with pytest.raises(TransactionStateError, match="init_transactions"):
            await producer.begin_transaction()
        with pytest.raises(TransactionStateError, match="init_transactions"):
            await producer.produce("t", b"x")  # refused before any network call
        with pytest.raises(TransactionStateError, match="init_transactions"):
            await producer.send("t", [b"x"])

    asyncio.run(scenario())


# -- the producer against a scripted broker ----------------------------------------------------

FAST = RetryPolicy(max_attempts=50, timeout_s=5, backoff_initial_s=0.001, backoff_max_s=0.01)


class FakeCluster:
    """One fake broker that leads topic ``t`` (2 partitions) and coordinates everything.

    ``script[api_key]`` lists error codes to answer first (then NONE); every request body is
    kept in ``requests`` as ``(api_key, version, body)``.
    """

    def __init__(self) -> None:
        self.broker = FakeBroker(1)
        self.requests: list[tuple[int, int, dict[str, Any]]] = []
        self.script: dict[int, list[ErrorCode]] = {}
        self.epoch = 0
        self.lock = threading.Lock()
        self.next_offset = {0: 0, 1: 0}
        #: When set, Produce answers wait until it is released (a batch held in flight).
        self.produce_gate: threading.Event | None = None
        handlers = {
            ApiKey.METADATA: self._metadata,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self._add_partitions,
            ApiKey.ADD_OFFSETS_TO_TXN: self._simple,
            ApiKey.END_TXN: self._simple,
            ApiKey.TXN_OFFSET_COMMIT: self._txn_offset_commit,
            ApiKey.PRODUCE: self._produce,
        }
        for api_key, handler in handlers.items():
            self.broker.handlers[api_key] = self._recorded(api_key, handler)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker.port}"

    def sent(self, api_key: int) -> list[dict[str, Any]]:
        with self.lock:
            return [body for key, _, body in self.requests if key == api_key]

    def _recorded(self, api_key: int, handler: Any) -> Any:
        def answer(header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
            with self.lock:
                self.requests.append((api_key, header.api_version, body))
                codes = self.script.get(api_key) or []
                code = codes.pop(0) if codes else ErrorCode.NONE
            return handler(body, code)

        return answer

    def _metadata(self, body: dict[str, Any], code: ErrorCode) -> dict[str, Any]:
        partition = {
            "error_code": 0,
            "leader_id": 1,
            "leader_epoch": 1,
            "replica_nodes": [1],
            "isr_nodes": [1],
            "offline_replicas": [],
        }
        return {
            "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": self.broker.port}],
            "cluster_id": "fake",
            "controller_id": 1,
            "topics": [
                {
                    "error_code": 0,
                    "name": "t",
                    "topic_id": uuid.UUID(int=1),
                    "partitions": [{**partition, "partition_index": i} for i in range(2)],
                }
            ],
        }

    def _find_coordinator(self, body: dict[str, Any], code: ErrorCode) -> dict[str, Any]:
        return {
            "coordinators": [
                {
                    "key": key,
                    "node_id": 1,
                    "host": "127.0.0.1",
                    "port": self.broker.port,
                    "error_code": 0,
                    "error_message": None,
                }
                for key in body["coordinator_keys"]
            ]
        }

    def _init_producer_id(self, body: dict[str, Any], code: ErrorCode) -> dict[str, Any]:
        if code is ErrorCode.NONE and body["producer_id"] >= 0:
            self.epoch += 1  # a bump
        return {"error_code": code, "producer_id": 4000, "producer_epoch": self.epoch}

    def _add_partitions(self, body: dict[str, Any], code: ErrorCode) -> dict[str, Any]:
        return _add_partitions_answer(
            {
                (topic["name"], index): code
                for topic in body["v3_and_below_topics"]
                for index in topic["partitions"]
            }
        )

    def _simple(self, body: dict[str, Any], code: ErrorCode) -> dict[str, Any]:
        return {"error_code": code}

    def _txn_offset_commit(self, body: dict[str, Any], code: ErrorCode) -> dict[str, Any]:
        return {
            "topics": [
                {
                    "name": topic["name"],
                    "partitions": [
                        {"partition_index": p["partition_index"], "error_code": code}
                        for p in topic["partitions"]
                    ],
                }
                for topic in body["topics"]
            ]
        }

    def _produce(self, body: dict[str, Any], code: ErrorCode) -> dict[str, Any]:
        if self.produce_gate is not None:
            assert self.produce_gate.wait(10)
        (topic,) = body["topic_data"]
        (data,) = topic["partition_data"]
        index = data["index"]
        header, _ = next(iter_batches(data["records"]))
        base = self.next_offset[index]
        if code is ErrorCode.NONE:
            self.next_offset[index] += header.records_count
        return {
            "responses": [
                {
                    "name": topic["name"],
                    "partition_responses": [
                        {"index": index, "error_code": code, "base_offset": base}
                    ],
                }
            ]
        }


@pytest.fixture
def fake() -> Iterator[FakeCluster]:
    cluster = FakeCluster()
    yield cluster
    cluster.broker.close()


def _producer(fake: FakeCluster, **options: Any) -> AsyncProducer:
    # Nothing lingers out before a flush: a commit wakes every partition's sender at once.
    options.setdefault("linger_ms", 10_000)
    producer = AsyncProducer(
        fake.bootstrap, transactional_id="app", delivery_timeout_ms=5000, **options
    )
    producer.client.retry = FAST
    producer._transaction_retry = lambda timeout_s: FAST  # type: ignore[method-assign]
    return producer


def _batches(fake: FakeCluster) -> list[tuple[str, Any]]:
    """(transactional id, batch header) of every Produce request, in order."""
    found = []
    for body in fake.sent(ApiKey.PRODUCE):
        (topic,) = body["topic_data"]
        (data,) = topic["partition_data"]
        header, _ = next(iter_batches(data["records"]))
        found.append((body["transactional_id"], header))
    return found


def test_a_committed_transaction_on_the_wire(fake: FakeCluster) -> None:
    fake.script[ApiKey.INIT_PRODUCER_ID] = [
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.NOT_COORDINATOR,
    ]
    fake.script[ApiKey.END_TXN] = [ErrorCode.CONCURRENT_TRANSACTIONS]

    async def scenario() -> None:
        async with _producer(fake) as producer:
            await producer.init_transactions()
            for _ in range(2):
                async with producer.transaction():
                    first = await producer.produce("t", b"a", partition=0)
                    second = await producer.produce("t", b"b", partition=1)
                    await producer.send_offsets_to_transaction({("in", 0): 42}, "billing")
                assert first.done() and second.done()

    asyncio.run(scenario())
    assert len(fake.sent(ApiKey.INIT_PRODUCER_ID)) == 3  # two refusals retried
    # Both partitions of a transaction in one AddPartitionsToTxn, once per transaction.
    added = fake.sent(ApiKey.ADD_PARTITIONS_TO_TXN)
    assert [body["v3_and_below_topics"] for body in added] == [
        [{"name": "t", "partitions": [0, 1]}]
    ] * 2
    batches = _batches(fake)
    assert len(batches) == 4
    for transactional_id, header in batches:
        assert transactional_id == "app"
        assert header.is_transactional and not header.is_control
        assert (header.producer_id, header.producer_epoch) == (4000, 0)
    # Sequence numbers continue across the transactions of one epoch, per partition.
    by_partition = [header.base_sequence for _, header in batches]
    assert sorted(by_partition) == [0, 0, 1, 1]
    ends = fake.sent(ApiKey.END_TXN)
    assert [body["committed"] for body in ends] == [True, True, True]  # one retried
    offsets = fake.sent(ApiKey.TXN_OFFSET_COMMIT)
    assert offsets[0]["group_id"] == "billing" and offsets[0]["transactional_id"] == "app"
    assert len(fake.sent(ApiKey.ADD_OFFSETS_TO_TXN)) == 2


def test_an_empty_transaction_sends_nothing(fake: FakeCluster) -> None:
    async def scenario() -> None:
        async with _producer(fake) as producer:
            await producer.init_transactions()
            await producer.begin_transaction()
            await producer.commit_transaction()
            await producer.begin_transaction()
            await producer.abort_transaction()

    asyncio.run(scenario())
    assert fake.sent(ApiKey.END_TXN) == [] and fake.sent(ApiKey.ADD_PARTITIONS_TO_TXN) == []


def test_abort_drops_queued_records_and_the_block_error_is_raised(fake: FakeCluster) -> None:
    async def scenario() -> list[BaseException | None]:
        producer = _producer(fake, linger_ms=10_000)  # nothing goes out before the abort
        await producer.init_transactions()
        futures = []
        with pytest.raises(RuntimeError, match="transform failed"):
            async with producer.transaction():
                futures.append(await producer.produce("t", b"never", partition=0))
                raise RuntimeError("transform failed")
        await asyncio.gather(*futures, return_exceptions=True)
        # The producer goes on with the next transaction.
        async with producer.transaction():
            futures.append(await producer.produce("t", b"next", partition=0))
        await producer.close()
        return [future.exception() for future in futures]

    outcomes = asyncio.run(scenario())
    assert isinstance(outcomes[0], TransactionAbortedError)
    assert outcomes[1] is None
    assert [body["committed"] for body in fake.sent(ApiKey.END_TXN)] == [True]
    assert len(_batches(fake)) == 1


def test_transactional_calls_run_one_at_a_time(fake: FakeCluster) -> None:
    async def scenario() -> list[BaseException | None]:
        async with _producer(fake) as producer:
            await producer.init_transactions()
            await producer.begin_transaction()
            await producer.produce("t", b"x", partition=0)
            outcomes = await asyncio.gather(
                producer.commit_transaction(),
                producer.commit_transaction(),
                producer.begin_transaction(),
                return_exceptions=True,
            )
            await producer.abort_transaction()  # the transaction the third call began
            return outcomes

    first, second, third = asyncio.run(scenario())
    assert first is None and third is None
    assert isinstance(second, TransactionStateError)
    assert [body["committed"] for body in fake.sent(ApiKey.END_TXN)] == [True]


def test_abort_waits_for_the_batch_in_flight(fake: FakeCluster) -> None:
    fake.produce_gate = threading.Event()

    async def scenario() -> tuple[Any, Any]:
        async with _producer(fake, linger_ms=0) as producer:
            await producer.init_transactions()
            await producer.begin_transaction()
            in_flight = await producer.produce("t", b"in flight", partition=0)
            while not fake.sent(ApiKey.PRODUCE):
                await asyncio.sleep(0.01)
            queued = await producer.produce("t", b"queued", partition=0)  # behind it
            aborting = asyncio.ensure_future(producer.abort_transaction())
            await asyncio.sleep(0.1)
            assert not aborting.done() and queued.done()  # dropped, the other one waited for
            assert fake.sent(ApiKey.END_TXN) == []
            fake.produce_gate.set()  # type: ignore[union-attr]
            await aborting
            return in_flight.result(), queued.exception()

    delivered, dropped = asyncio.run(scenario())
    assert delivered.offset == 0
    assert isinstance(dropped, TransactionAbortedError)
    assert [body["committed"] for body in fake.sent(ApiKey.END_TXN)] == [False]
    assert len(fake.sent(ApiKey.PRODUCE)) == 1


def test_a_failed_record_requires_an_abort_then_bumps_the_epoch(fake: FakeCluster) -> None:
    fake.script[ApiKey.PRODUCE] = [ErrorCode.CORRUPT_MESSAGE]  # not retried

    async def scenario() -> None:
        async with _producer(fake) as producer:
            await producer.init_transactions()
            await producer.begin_transaction()
            failed = await producer.produce("t", b"x", partition=0)
            with pytest.raises(TransactionAbortRequiredError) as caught:
                await producer.commit_transaction()
            assert caught.value.__cause__ is failed.exception()
            with pytest.raises(TransactionAbortRequiredError):
                await producer.produce("t", b"y", partition=0)
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.produce("t", b"z", partition=0)

    asyncio.run(scenario())
    assert [body["committed"] for body in fake.sent(ApiKey.END_TXN)] == [False, True]
    bump = fake.sent(ApiKey.INIT_PRODUCER_ID)[-1]
    assert (bump["producer_id"], bump["producer_epoch"]) == (4000, 0)
    # After the bump the sequence numbers start over, with the new epoch.
    _, last = _batches(fake)[-1]
    assert (last.producer_epoch, last.base_sequence) == (1, 0)


def test_offsets_refused_by_the_group_coordinator_require_an_abort(fake: FakeCluster) -> None:
    fake.script[ApiKey.TXN_OFFSET_COMMIT] = [ErrorCode.UNKNOWN_MEMBER_ID]

    async def scenario() -> None:
        async with _producer(fake) as producer:
            await producer.init_transactions()
            with pytest.raises(TransactionAbortRequiredError) as caught:
                async with producer.transaction():
                    stale = ConsumerGroupMetadata("billing", generation_id=3, member_id="gone")
                    await producer.send_offsets_to_transaction([("in", 0, 7)], stale)
            cause = caught.value.__cause__
            assert isinstance(cause, KafkaError) and cause.code is ErrorCode.UNKNOWN_MEMBER_ID
            # The block's error aborted the transaction: the producer goes on.
            async with producer.transaction():
                await producer.send_offsets_to_transaction({("in", 0): 7}, "billing")

    asyncio.run(scenario())
    sent = fake.sent(ApiKey.TXN_OFFSET_COMMIT)
    assert (sent[0]["generation_id"], sent[0]["member_id"]) == (3, "gone")
    assert [body["committed"] for body in fake.sent(ApiKey.END_TXN)] == [False, True]
    assert len(fake.sent(ApiKey.INIT_PRODUCER_ID)) == 1  # a refusal needs no epoch bump


@pytest.mark.parametrize(
    ("api_key", "code"),
    [
        (ApiKey.END_TXN, ErrorCode.PRODUCER_FENCED),
        (ApiKey.ADD_PARTITIONS_TO_TXN, ErrorCode.PRODUCER_FENCED),
        (ApiKey.PRODUCE, ErrorCode.INVALID_PRODUCER_EPOCH),  # a leader saw the new epoch
    ],
)
def test_a_fenced_producer_is_unusable(fake: FakeCluster, api_key: int, code: ErrorCode) -> None:
    fake.script[api_key] = [code]

    def scenario() -> None:
        with Producer(
            fake.bootstrap, transactional_id="app", linger_ms=1, delivery_timeout_ms=5000
        ) as producer:
            producer.init_transactions()
            with pytest.raises(ProducerFencedError):
                with producer.transaction():
                    delivered = producer.produce("t", b"zombie", partition=0)
            if api_key != ApiKey.END_TXN:
                assert isinstance(delivered.exception(), ProducerFencedError)
            for call in (
                producer.begin_transaction,
                producer.abort_transaction,
                producer.commit_transaction,
            ):
                with pytest.raises(ProducerFencedError):
                    call()

    scenario()
    assert not any(body["committed"] is False for body in fake.sent(ApiKey.END_TXN))
