"""``AsyncProducer`` and its synchronous twin ``Producer``: batching, idempotent, routed by
cluster metadata.

    async with AsyncProducer("127.0.0.1:9092") as producer:
        delivered = await producer.send("orders", [b"paid", Message(b"shipped", key="o-17")])
        future = await producer.produce("orders", b"refunded", key="o-17")   # no waiting
        await producer.flush()

    with Producer("127.0.0.1:9092", acks="all") as producer:
        producer.send("orders", "paid", acks=1)

How it works:

* **Partitioning**: a record with a key goes to ``murmur2(key) % partitions``, the partition
  the Java client (and confluent-kafka with ``partitioner=murmur2_random``) picks; a record
  without one goes to the topic's *sticky* partition, which moves on to the next partition
  each time a batch with keyless records is sent (Kafka's sticky partitioner: big batches
  when records come fast, round-robin when they come one by one).
* **Batching**: records collect per partition into one batch until it holds ``batch_size``
  bytes or its first record waited ``linger_ms``; ``flush`` and ``close`` send at once. Each
  partition sends its batches one at a time, in order; partitions proceed in parallel, at most
  ``max_in_flight`` Produce requests at once. Records wait in at most ``buffer_memory`` bytes:
  ``produce`` waits for room (back pressure) rather than buffering without bound.
* **Delivery**: ``produce`` returns a future of ``RecordMetadata`` (and calls ``on_delivery(
  error, metadata)``); ``send`` waits for its messages and returns their metadata. ``send``
  is the bulk path: it queues runs of records per partition at once, and each batch resolves
  one future for all of the call's records in it rather than one per record. A batch is
  retried on routing errors and lost connections (refreshing metadata, backing off) until
  ``delivery_timeout_ms`` after it was sent first; then its futures fail with the typed error.
* **Idempotence** (on by default with ``acks="all"``): the producer takes a producer id
  (InitProducerId) and numbers each partition's records; a retried batch carries the same
  sequence numbers, so a leader that already wrote it answers with its offset instead of
  writing it twice, across leader failover too. Records sent with ``acks`` 0 or 1 (per call)
  go without sequence numbers. When a batch fails for good, whether it was written is unknown;
  the producer then takes a new producer id, so later batches cannot be mistaken for it.
* **Transactions** (``transactional_id=``, which implies idempotence and ``acks="all"``):
  ``init_transactions`` finds the transaction coordinator and takes the id's producer id and
  epoch (fencing any older producer of the id); ``begin_transaction``, ``produce`` / ``send``,
  ``send_offsets_to_transaction`` and ``commit_transaction`` or ``abort_transaction`` make
  the records (and the consumed offsets) visible to ``read_committed`` readers all at once or
  never; ``async with producer.transaction():`` commits, or aborts on an exception. Before
  the first batch to a partition goes out, the partition is added to the transaction: one
  AddPartitionsToTxn for every partition whose sender waits at that moment. ``commit``
  flushes first; ``abort`` drops the records not sent yet (their futures fail with
  ``TransactionAbortedError``) and waits for those in flight. Errors: see
  ``flux.sdk.transactions`` (fenced: ``ProducerFencedError``, and the producer is unusable).
* **Security**: ``security=`` (a ``ClientSecurity`` or Kafka's dotted names, see
  ``flux.sdk.security``) secures every connection; a refused login fails the records'
  futures with ``FluxAuthenticationError``, which is not retried.
* **Bad input fails before the network**: invalid settings raise ``ConfigurationError`` naming
  the parameter at construction; a record larger than ``max_request_size`` raises
  ``MessageTooLargeError`` from ``produce``; a topic that does not exist raises
  ``UnknownTopicError`` (unless the cluster creates topics on first use and
  ``allow_auto_topic_creation`` is on).

Thread-safety: an ``AsyncProducer`` belongs to one event loop. A ``Producer`` may be used from
any number of threads; it runs an ``AsyncProducer`` on its own event-loop thread, and
``on_delivery`` callbacks run there (keep them short).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from flux.protocol.api import ApiKey
from flux.protocol.compression import Compression
from flux.protocol.errors import ErrorCode
from flux.protocol.partitioner import partition_for_key
from flux.protocol.records import build_batch

from . import limits
from ._sync import LoopThread, SyncProxy
from .cluster_client import (
    COORDINATOR_RETRY_CODES,
    LEADER_RETRY_CODES,
    TRANSACTION_KEY,
    ClusterClient,
)
from .errors import (
    ConfigurationError,
    FluxConnectionError,
    FluxError,
    FluxProtocolError,
    FluxTimeoutError,
    KafkaError,
    MessageTooLargeError,
    TransactionAbortedError,
    TransactionAbortRequiredError,
    TransactionStateError,
    UnknownTopicError,
    error_for,
)
from .messages import (
    ConsumerGroupMetadata,
    HeadersInput,
    Message,
    MessageInput,
    RecordMetadata,
    as_bytes,
    as_message,
    encode_headers,
)
from .metadata import RetryPolicy
from .security import ClientSecurity
from .transactions import (
    RETRY_CODES as TXN_RETRY_CODES,
)
from .transactions import (
    TransactionManager,
    TxnPhase,
    add_offsets_body,
    add_partitions_body,
    as_group_metadata,
    end_txn_body,
    init_producer_id_body,
    is_fatal,
    normalize_offsets,
    read_add_partitions,
    read_error_code,
    read_init_producer_id,
    read_txn_offset_commit,
    txn_offset_commit_body,
)

__all__ = [
    "IDEMPOTENT_RETRY_CODES",
    "AsyncProducer",
    "DeliveryCallback",
    "Producer",
    "parse_acks",
]

log = logging.getLogger("flux.sdk.producer")

DeliveryCallback = Callable[[Exception | None, RecordMetadata | None], None]

#: An idempotent batch is also retried on these: the broker deduplicates the second copy.
IDEMPOTENT_RETRY_CODES = LEADER_RETRY_CODES | frozenset(
    {
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)
_COMPRESSION_NAMES = {codec.name.lower(): codec for codec in Compression}
#: Sequence numbers are int32 and wrap to 0 after the largest (as in Kafka).
_SEQUENCE_MODULUS = 1 << 31
#: Bytes a record adds to a batch besides its key, value and headers (varints, attributes),
#: and the bytes of a batch header plus a Produce request around it: a generous estimate, so
#: a record that passes the size check also fits the request.
_RECORD_OVERHEAD_BYTES = 32
_BYTES_OR_NONE = frozenset({bytes, type(None)})
_REQUEST_OVERHEAD_BYTES = 61 + 128
#: Transport failures after which a transaction request's outcome is unknown.
_UNKNOWN_OUTCOME_ERRORS = (FluxConnectionError, FluxTimeoutError, FluxProtocolError)


def parse_acks(acks: int | str) -> int:
    """``"all"`` / -1, 0 or 1 (also as strings) as the Produce request's number."""
    if isinstance(acks, bool):
        raise ConfigurationError(f"acks must be 'all', -1, 0 or 1, got {acks!r}")
    text = str(acks).strip().lower()
    if text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise ConfigurationError(f"acks must be 'all', -1, 0 or 1, got {acks!r}")


def _check_range(name: str, value: Any, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigurationError(f"{name} must be a number in {low}..{high}, got {value!r}")


#: A queued record as ``build_batch`` takes it: key, value, headers, timestamp (None: now).
_QueuedRecord = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int | None]


@dataclass(eq=False)
class _Batch:
    """Records waiting to go to one partition in one Produce request (one ``acks``).

    ``futures`` has one entry per record: its ``produce`` future, or None for a record queued
    by ``send``, which waits on one of ``shared`` instead: a future per ``send`` call, resolved
    with the batch's base offset (the record's offset is that plus its index in the batch).
    """

    topic: str
    partition: int
    acks: int
    created_at: float
    records: list[_QueuedRecord] = field(default_factory=list)
    futures: list[asyncio.Future[RecordMetadata] | None] = field(default_factory=list)
    shared: list[asyncio.Future[int]] = field(default_factory=list)
    size_bytes: int = 0
    closed: bool = False
    keyless: bool = False


@dataclass(eq=False)
class _PartitionQueue:
    """The batches of one partition, oldest first; the last one may still grow."""

    batches: deque[_Batch] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    sender: asyncio.Task[None] | None = None


class AsyncProducer:
    """See the module docstring."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "flux-producer",
        acks: int | str = "all",
        idempotent: bool | None = None,
        linger_ms: float = 5,
        batch_size: int = 64 * 1024,
        compression: str | None = None,
        max_in_flight: int = limits.IN_FLIGHT_REQUESTS_DEFAULT,
        buffer_memory: int = limits.BUFFER_BYTES_DEFAULT,
        max_request_size: int = limits.MESSAGE_BYTES_DEFAULT,
        delivery_timeout_ms: float = limits.RETRY_TIMEOUT_S * 1000,
        request_timeout_ms: float = limits.REQUEST_TIMEOUT_S * 1000,
        allow_auto_topic_creation: bool = True,
        security: ClientSecurity | Mapping[str, Any] | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = limits.TRANSACTION_TIMEOUT_MS_DEFAULT,
    ) -> None:
        self.acks = parse_acks(acks)
        if transactional_id is not None:
            if not isinstance(transactional_id, str) or not transactional_id:
                raise ConfigurationError(
                    f"transactional_id must be a non-empty string, got {transactional_id!r}"
                )
            if idempotent is False:
                raise ConfigurationError("transactional_id needs idempotent=True (the default)")
            if self.acks != -1:
                raise ConfigurationError(f"transactional_id needs acks='all', got acks={acks!r}")
            idempotent = True
        _check_range(
            "transaction_timeout_ms", transaction_timeout_ms, 1, limits.TRANSACTION_TIMEOUT_MS_MAX
        )
        if idempotent is None:
            idempotent = self.acks == -1
        if idempotent and self.acks != -1:
            raise ConfigurationError(f"idempotent=True needs acks='all', got acks={acks!r}")
        _check_range("linger_ms", linger_ms, 0, limits.LINGER_MS_MAX)
        _check_range("batch_size", batch_size, 1, limits.BATCH_BYTES_MAX)
        _check_range("max_in_flight", max_in_flight, 1, limits.IN_FLIGHT_REQUESTS_MAX)
        _check_range("buffer_memory", buffer_memory, 1, limits.BUFFER_BYTES_MAX)
        _check_range("max_request_size", max_request_size, 1, limits.MESSAGE_BYTES_MAX)
        _check_range(
            "delivery_timeout_ms", delivery_timeout_ms, 1, limits.RETRY_TIMEOUT_MAX_S * 1e3
        )
        _check_range("request_timeout_ms", request_timeout_ms, 1, limits.RETRY_TIMEOUT_MAX_S * 1e3)
        codec_name = (compression or "none").lower()
        if codec_name not in _COMPRESSION_NAMES:
            raise ConfigurationError(
                f"compression must be one of {sorted(_COMPRESSION_NAMES)}, got {compression!r}"
            )
        self.idempotent = idempotent
        self.linger_s = linger_ms / 1000
        self.batch_size = int(batch_size)
        self.compression = _COMPRESSION_NAMES[codec_name]
        self.max_request_size = int(max_request_size)
        self.buffer_memory = int(buffer_memory)
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.client = ClusterClient(
            bootstrap,
            client_id=client_id,
            request_timeout_s=request_timeout_ms / 1000,
            retry=RetryPolicy(timeout_s=self.delivery_timeout_s),
            allow_auto_topic_creation=allow_auto_topic_creation,
            security=security,
        )
        self._queues: dict[tuple[str, int], _PartitionQueue] = {}
        self._sticky: dict[str, int] = {}
        self._in_flight = asyncio.Semaphore(int(max_in_flight))
        self._buffered_bytes = 0
        self._buffer_space = asyncio.Condition()
        # Records queued and not yet resolved; the event is set whenever that is none.
        self._unfinished = 0
        self._all_delivered = asyncio.Event()
        self._all_delivered.set()
        self._flushing = 0
        self._closed = False
        self._producer_id = -1
        self._producer_epoch = -1
        self._producer_id_lock = asyncio.Lock()
        self._sequences: dict[tuple[str, int], int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # Transactions: the state machine, the partitions senders wait to see added to the
        # transaction (one future each) and the task adding them.
        self._transaction = (
            TransactionManager(transactional_id, int(transaction_timeout_ms))
            if transactional_id is not None
            else None
        )
        # The transactional methods run one at a time (a second commit waits for the first,
        # then finds no transaction), so the state machine sees one call's steps in order.
        self._transaction_lock = asyncio.Lock()
        self._registrations: dict[tuple[str, int], asyncio.Future[None]] = {}
        self._unregistered: list[tuple[str, int]] = []
        self._registrar: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- public ----------------------------------------------------------------------------

    async def partition_for(self, topic: str, key: bytes | str | None) -> int:
        """murmur2 of the key modulo the partition count; the sticky partition without one."""
        count = await self.client.partition_count(topic)
        encoded = as_bytes(key, what="key")
        if encoded is not None:
            return partition_for_key(encoded, count)
        sticky = self._sticky[topic] = self._sticky.get(topic, 0) % count
        return sticky

    async def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        *,
        key: bytes | str | None = None,
        headers: HeadersInput | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        id: bytes | str | None = None,
        acks: int | str | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the future resolves when it is acknowledged (per ``acks``).
        A transactional producer queues records only inside a transaction."""
        if self._closed:
            raise ConfigurationError("the producer is closed")
        acks_number = self.acks if acks is None else parse_acks(acks)
        if self._transaction is not None:
            self._check_transactional_send(acks_number)
        record, size = self._encode(topic, key, value, headers, id, timestamp_ms)
        metadata = self.client.metadata
        cached = metadata.snapshot.topics.get(topic)
        if partition is None and cached is not None and not metadata.needs_refresh():
            # The hot path: metadata at hand, no coroutine hops.
            count = len(cached.partitions)
            if record[0] is not None:
                chosen = partition_for_key(record[0], count)
            else:
                chosen = self._sticky[topic] = self._sticky.get(topic, 0) % count
        else:
            chosen = await self._partition_slowly(topic, record[0], partition)
        if self._buffered_bytes + size <= self.buffer_memory and not self._buffer_space._waiters:
            self._buffered_bytes += size  # room, and nobody waits before us: no lock round trip
        else:
            await self._reserve(size)
        if self._transaction is not None and self._transaction.phase is not TxnPhase.IN_TRANSACTION:
            await self._release(size)  # the transaction ended while this call waited
            self._transaction.check_send()
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        # The Future constructor itself: loop.create_future() is a Python-level hop.
        future: asyncio.Future[RecordMetadata] = asyncio.Future(loop=self._loop)
        if on_delivery is not None:
            future.add_done_callback(lambda done: _call_back(on_delivery, done))
        self._note_queued(1)
        queue = self._queues.get((topic, chosen))
        batch = queue.batches[-1] if queue is not None and queue.batches else None
        if (
            batch is not None
            and not batch.closed
            and batch.acks == acks_number
            and batch.size_bytes + size < self.batch_size
            and len(batch.records) < limits.SEND_BATCH_RECORDS_MAX - 1
            and self.linger_s > 0
            and not self._flushing
            and queue.sender is not None  # type: ignore[union-attr]
            and not queue.sender.done()  # type: ignore[union-attr]
        ):
            # The common case, inlined: the open batch takes the record and stays open.
            batch.records.append(record)
            batch.futures.append(future)
            batch.size_bytes += size
            if record[0] is None:
                batch.keyless = True
        elif self._append(topic, chosen, acks_number, record, size, future):
            # A batch is ready: let its sender start on it while the caller queues more.
            await asyncio.sleep(0)
        return future

    async def send(
        self,
        topic: str,
        messages: MessageInput | Iterable[MessageInput],
        *,
        acks: int | str | None = None,
    ) -> Any:
        """The runtime API: send one message (a ``Message``, a value, or a dict of
        ``Message`` fields) or a list of them and wait until each is acknowledged per ``acks``
        (default: the producer's). Returns the ``RecordMetadata`` (a list for a list). If any
        message failed, the first error is raised once every message has an outcome.

        The messages go to the partitions ``produce`` would choose, in order, within the same
        bounds; but they are queued a run of records at a time, and each batch resolves one
        future for all of this call's records in it instead of one future per record."""
        if self._closed:
            raise ConfigurationError("the producer is closed")
        single = not isinstance(messages, (list, tuple)) and not _is_iterable_of_messages(messages)
        acks_number = self.acks if acks is None else parse_acks(acks)
        if self._transaction is not None:
            self._check_transactional_send(acks_number)
        # Every message is checked (size, partition) before any is queued.
        records, sizes, partitions, count = await self._prepare(
            topic,
            [messages] if single else messages,  # type: ignore[list-item,arg-type]
        )
        results = await self._send_prepared(
            topic, acks_number, records, sizes, partitions, count, metadata=True
        )
        assert results is not None
        return results[0] if single else results

    async def send_records(
        self,
        topic: str,
        values: list[bytes | None],
        keys: list[bytes | None] | None = None,
        *,
        acks: int | str | None = None,
    ) -> int:
        """The bulk form of ``send`` for many plain records (what a Spark task writes): values
        and optional keys, bytes or None, partitioned as ``send`` would (a key's hash, else the
        sticky partition); waits until each is acknowledged and returns how many were sent,
        without a ``RecordMetadata`` per record. A record too large for a request raises
        ``MessageTooLargeError`` before anything is queued; other errors as ``send``."""
        if self._closed:
            raise ConfigurationError("the producer is closed")
        if keys is not None and len(keys) != len(values):
            raise ConfigurationError(f"{len(keys)} keys for {len(values)} values")
        acks_number = self.acks if acks is None else parse_acks(acks)
        if self._transaction is not None:
            self._check_transactional_send(acks_number)
        if type(topic) is not str or not topic:
            raise ConfigurationError(f"topic must be a non-empty string, got {topic!r}")
        overhead = _RECORD_OVERHEAD_BYTES
        limit = self.max_request_size - _REQUEST_OVERHEAD_BYTES
        if keys is None:
            records: list[_QueuedRecord] = [(None, value, (), None) for value in values]
            sizes = [overhead + (0 if value is None else len(value)) for value in values]
            partitions = [-1] * len(values)
        else:
            records = [(key, value, (), None) for key, value in zip(keys, values, strict=True)]
            sizes = [
                overhead + (0 if key is None else len(key)) + (0 if value is None else len(value))
                for key, value in zip(keys, values, strict=True)
            ]
            partitions = [-1 if key is None else -2 for key in keys]
        if sizes and max(sizes) > limit:
            raise MessageTooLargeError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"a record of {max(sizes)} bytes for {topic!r} exceeds max_request_size "
                f"({self.max_request_size} bytes, with request overhead)",
            )
        if not {type(value) for value in values} <= _BYTES_OR_NONE or (
            keys is not None and not {type(key) for key in keys} <= _BYTES_OR_NONE
        ):
            raise ConfigurationError("send_records takes keys and values as bytes or None")
        if not records:
            return 0
        count = await self.client.partition_count(topic)
        if keys is not None:
            for index, partition in enumerate(partitions):
                if partition == -2:
                    partitions[index] = partition_for_key(records[index][0], count)  # type: ignore[arg-type]
        await self._send_prepared(
            topic, acks_number, records, sizes, partitions, count, metadata=False
        )
        return len(records)

    async def _send_prepared(
        self,
        topic: str,
        acks_number: int,
        records: list[_QueuedRecord],
        sizes: list[int],
        partitions: list[int],
        count: int,
        *,
        metadata: bool,
    ) -> list[RecordMetadata] | None:
        """Queue checked records in runs per partition and wait for every outcome; the
        ``RecordMetadata`` of each (with ``metadata``), the first error raised in order."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        # Per run of records queued together: the future of the batch it joined, the index of
        # its first record in that batch, of its first message, its length and partition.
        placed: list[tuple[asyncio.Future[int], int, int, int, int]] = []
        shared: dict[_Batch, asyncio.Future[int]] = {}  # batch -> this call's future in it
        start = 0
        while start < len(records):
            wanted = partitions[start]
            end = start + 1
            while end < len(records) and partitions[end] == wanted:
                end += 1
            while start < end:  # a run of messages for one partition (or the sticky one)
                partition = wanted if wanted >= 0 else self._sticky_partition(topic, count)
                taken = self._fit(topic, partition, acks_number, sizes, start, end)
                run_bytes = sum(sizes[start : start + taken])
                if (
                    self._buffered_bytes + run_bytes <= self.buffer_memory
                    and not self._buffer_space._waiters
                ):
                    self._buffered_bytes += run_bytes
                else:
                    await self._reserve(run_bytes)
                    # Batches may have gone and the sticky partition moved on meanwhile.
                    partition = wanted if wanted >= 0 else self._sticky_partition(topic, count)
                    fitted = self._fit(topic, partition, acks_number, sizes, start, end)
                    if fitted < taken:
                        fitted_bytes = sum(sizes[start : start + fitted])
                        await self._release(run_bytes - fitted_bytes)
                        taken, run_bytes = fitted, fitted_bytes
                txn = self._transaction
                if txn is not None and txn.phase is not TxnPhase.IN_TRANSACTION:
                    # The transaction ended while this call waited: what was queued has its
                    # outcome (committed or dropped), the rest is refused.
                    await self._release(run_bytes)
                    await asyncio.gather(*shared.values(), return_exceptions=True)
                    txn.check_send()
                self._note_queued(taken)
                batch, first_index, ready = self._add_run(
                    topic, partition, acks_number, records[start : start + taken], run_bytes
                )
                future = shared.get(batch)
                if future is None:
                    future = shared[batch] = self._loop.create_future()
                    batch.shared.append(future)
                placed.append((future, first_index, start, taken, partition))
                start += taken
                if ready:
                    await asyncio.sleep(0)  # a batch is ready: let its sender start on it
        # Every message has an outcome once these are done; errors are raised below in
        # message order.
        await asyncio.gather(*shared.values(), return_exceptions=True)
        results: list[RecordMetadata] = []
        for future, first_index, _, taken, partition in placed:
            error = future.exception()
            if error is not None:
                raise error
            if not metadata:
                continue
            base_offset = future.result()
            if base_offset < 0:  # acks=0: nobody says where they landed
                results.extend(RecordMetadata(topic, partition, -1) for _ in range(taken))
            else:
                first = base_offset + first_index
                results.extend(
                    RecordMetadata(topic, partition, offset)
                    for offset in range(first, first + taken)
                )
        return results if metadata else None

    async def flush(self, timeout_s: float | None = None) -> None:
        """Send every queued record now and wait until each has an outcome.

        ``FluxTimeoutError`` if that takes longer than ``timeout_s``."""
        self._flushing += 1
        try:
            for queue in self._queues.values():
                queue.wakeup.set()
            try:
                async with asyncio.timeout(timeout_s):
                    await self._all_delivered.wait()
            except TimeoutError as error:
                raise FluxTimeoutError(
                    f"flush: {self._unfinished} records still unacknowledged after {timeout_s} s"
                ) from error
        finally:
            self._flushing -= 1

    async def close(self, timeout_s: float | None = None) -> None:
        """Flush (within ``timeout_s``, default the delivery timeout), then stop. A
        transaction still running is aborted first (as Kafka's producers do)."""
        if self._closed:
            return
        timeout_s = self.delivery_timeout_s if timeout_s is None else timeout_s
        try:
            await self._abort_on_close(timeout_s)
            await self.flush(timeout_s)
        finally:
            self._closed = True
            for queue in self._queues.values():
                if queue.sender is not None:
                    queue.sender.cancel()
            senders = [q.sender for q in self._queues.values() if q.sender is not None]
            if self._registrar is not None:
                self._registrar.cancel()
                senders.append(self._registrar)
            await asyncio.gather(*senders, return_exceptions=True)
            for queue in self._queues.values():
                for batch in queue.batches:
                    for future in [*batch.futures, *batch.shared]:
                        if future is not None and not future.done():
                            future.set_exception(
                                FluxError("the producer was closed before delivery")
                            )
            await self.client.close()

    # -- transactions ----------------------------------------------------------------------

    @property
    def transactional_id(self) -> str | None:
        return None if self._transaction is None else self._transaction.transactional_id

    async def init_transactions(self, timeout_s: float | None = None) -> None:
        """Find the transaction coordinator of ``transactional_id`` and take the id's producer
        id and epoch. A transaction an older producer of the id left open is aborted by the
        coordinator first (that producer is fenced). Retried on CONCURRENT_TRANSACTIONS and
        coordinator moves for up to ``timeout_s`` (default: the delivery timeout)."""
        txn = self._require_transaction("init_transactions")
        async with self._transaction_lock:
            txn.check_init()
            body = init_producer_id_body(txn.transactional_id, txn.timeout_ms)
            try:
                producer_id, epoch = await self._call_transaction_coordinator(
                    ApiKey.INIT_PRODUCER_ID, body, read_init_producer_id, timeout_s
                )
            except KafkaError as error:
                if is_fatal(error):
                    _raise(txn.fail(error))
                raise
            txn.initialized(producer_id, epoch)
            self._sequences.clear()

    async def begin_transaction(self) -> None:
        """Start a transaction: ``produce``, ``send`` and ``send_offsets_to_transaction`` join
        it until ``commit_transaction`` or ``abort_transaction`` (no request is sent yet)."""
        txn = self._require_transaction("begin_transaction")
        async with self._transaction_lock:
            txn.begin()

    async def send_offsets_to_transaction(
        self,
        offsets: Any,
        group: str | ConsumerGroupMetadata,
        timeout_s: float | None = None,
    ) -> None:
        """Commit consumed offsets as part of the transaction: they become the group's
        committed offsets if and only if the transaction commits.

        ``offsets``: ``{(topic, partition): offset of the next record to consume}`` or a list
        of ``TopicPartition``-like objects with an ``offset`` (or ``(topic, partition,
        offset)`` tuples). ``group``: the group id, or the consumer's ``group_metadata()`` (its
        generation and member id go along). Sends AddOffsetsToTxn to the transaction
        coordinator, then TxnOffsetCommit to the group's coordinator."""
        txn = self._require_transaction("send_offsets_to_transaction")
        normalized = normalize_offsets(offsets)
        membership = as_group_metadata(group)
        async with self._transaction_lock:
            txn.check_offsets()
            if normalized:
                await self._send_offsets(txn, normalized, membership, timeout_s)

    async def _send_offsets(
        self,
        txn: TransactionManager,
        offsets: dict[tuple[str, int], int],
        membership: ConsumerGroupMetadata,
        timeout_s: float | None,
    ) -> None:
        try:
            await self._call_transaction_coordinator(
                ApiKey.ADD_OFFSETS_TO_TXN,
                add_offsets_body(
                    txn.transactional_id, txn.producer_id, txn.producer_epoch, membership.group_id
                ),
                lambda response, version: read_error_code(
                    response, version, what="AddOffsetsToTxn"
                ),
                timeout_s,
            )
            txn.offsets_added()
            await self.client.call_coordinator(
                membership.group_id,
                ApiKey.TXN_OFFSET_COMMIT,
                txn_offset_commit_body(
                    txn.transactional_id,
                    membership,
                    txn.producer_id,
                    txn.producer_epoch,
                    offsets,
                ),
                read_txn_offset_commit,
                retry_codes=TXN_RETRY_CODES | {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
                retry=self._transaction_retry(timeout_s),
            )
        except FluxError as error:
            _raise(
                self._transaction_failed(
                    error, "send_offsets_to_transaction", unknown_outcome=_outcome_unknown(error)
                )
            )

    async def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Flush every record of the transaction, then commit it (EndTxn): its records and
        offsets become visible to read_committed readers at once.

        If a record failed, raises ``TransactionAbortRequiredError`` (its cause chained):
        call ``abort_transaction``. If the outcome is unknown (``FluxTimeoutError``, the
        coordinator unreachable), call ``commit_transaction`` again."""
        txn = self._require_transaction("commit_transaction")
        timeout_s = self.delivery_timeout_s if timeout_s is None else timeout_s
        async with self._transaction_lock:
            txn.begin_commit()
            await self.flush(timeout_s)
            await self._wait_registrar()
            if txn.phase is not TxnPhase.COMMITTING:  # a record or a partition failed meanwhile
                txn.begin_commit()  # raises the abortable or fatal error
            if txn.started:
                await self._end_transaction(txn, committed=True, timeout_s=timeout_s)
            txn.completed()

    async def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Abort the transaction: records not sent yet are dropped (their futures fail with
        ``TransactionAbortedError``), records in flight are waited for, then EndTxn aborts
        everything the transaction wrote: read_committed readers never see it."""
        txn = self._require_transaction("abort_transaction")
        timeout_s = self.delivery_timeout_s if timeout_s is None else timeout_s
        async with self._transaction_lock:
            txn.begin_abort()
            await self._drop_queued()
            await self.flush(timeout_s)  # what remains is in flight
            await self._wait_registrar()
            if txn.fatal_error is not None:
                txn.begin_abort()  # raises it
            if txn.started:
                await self._end_transaction(txn, committed=False, timeout_s=timeout_s)
            if txn.epoch_bump_needed:
                await self._bump_epoch(txn, timeout_s)
            txn.completed()

    def transaction(self) -> contextlib.AbstractAsyncContextManager[AsyncProducer]:
        """``async with producer.transaction():`` begins a transaction, commits it when the
        block ends, and aborts it when the block (or the commit) raises; the error is then
        raised. A fenced producer is not aborted: the error is raised as it is."""
        return self._transaction_scope()

    @contextlib.asynccontextmanager
    async def _transaction_scope(self) -> AsyncIterator[AsyncProducer]:
        await self.begin_transaction()
        try:
            yield self
        except BaseException:
            await self._abort_after_error()
            raise
        try:
            await self.commit_transaction()
        except BaseException:
            await self._abort_after_error()
            raise

    async def _abort_after_error(self) -> None:
        """Abort after the transaction's block or commit raised (not if the producer cannot
        abort: fenced, or a commit whose outcome is unknown, which must be retried)."""
        txn = self._transaction
        assert txn is not None
        if txn.phase in (TxnPhase.IN_TRANSACTION, TxnPhase.ABORTABLE_ERROR, TxnPhase.ABORTING):
            await self.abort_transaction()

    async def _abort_on_close(self, timeout_s: float) -> None:
        txn = self._transaction
        if txn is None or txn.phase not in (
            TxnPhase.IN_TRANSACTION,
            TxnPhase.ABORTABLE_ERROR,
            TxnPhase.ABORTING,
        ):
            return
        log.info("closing producer %r: aborting its running transaction", txn.transactional_id)
        try:
            await self.abort_transaction(timeout_s)
        except FluxError as error:
            log.warning("aborting transaction %r on close failed: %s", txn.transactional_id, error)

    def _require_transaction(self, what: str) -> TransactionManager:
        if self._closed:
            raise ConfigurationError("the producer is closed")
        if self._transaction is None:
            raise TransactionStateError(f"{what} needs a producer with a transactional_id")
        return self._transaction

    def _check_transactional_send(self, acks: int) -> None:
        assert self._transaction is not None
        if acks != -1:
            raise ConfigurationError(f"a transactional producer sends with acks='all', not {acks}")
        self._transaction.check_send()

    def _transaction_retry(self, timeout_s: float | None) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=limits.RETRY_ATTEMPTS_MAX,
            timeout_s=self.delivery_timeout_s if timeout_s is None else timeout_s,
        )

    async def _call_transaction_coordinator(
        self,
        api_key: int,
        body: dict[str, Any],
        handle: Callable[[dict[str, Any], int], Any],
        timeout_s: float | None,
        *,
        retry_codes: frozenset[ErrorCode] = TXN_RETRY_CODES,
    ) -> Any:
        txn = self._transaction
        assert txn is not None
        return await self.client.call_coordinator(
            txn.transactional_id,
            api_key,
            body,
            handle,
            key_type=TRANSACTION_KEY,
            retry_codes=retry_codes,
            retry=self._transaction_retry(timeout_s),
        )

    def _transaction_failed(
        self, error: BaseException, what: str, *, unknown_outcome: bool
    ) -> BaseException:
        """The error a failed transaction request raises: fatal ones as they are (the producer
        is done), others as ``TransactionAbortRequiredError`` (the transaction is)."""
        txn = self._transaction
        assert txn is not None
        failure = txn.fail(error, unknown_outcome=unknown_outcome)
        if txn.phase is TxnPhase.FATAL_ERROR:
            return failure
        return txn.abort_required(what)

    async def _end_transaction(
        self, txn: TransactionManager, *, committed: bool, timeout_s: float
    ) -> None:
        """EndTxn, retried. Fatal errors end the producer; an unknown outcome leaves the phase
        as it is (the same call may be made again); other errors make the transaction
        abortable (a commit) or are raised (an abort, which may be tried again)."""
        body = end_txn_body(
            txn.transactional_id, txn.producer_id, txn.producer_epoch, committed=committed
        )
        what = "commit_transaction" if committed else "abort_transaction"
        try:
            await self._call_transaction_coordinator(
                ApiKey.END_TXN,
                body,
                lambda response, version: read_error_code(response, version, what="EndTxn"),
                timeout_s,
            )
        except FluxError as error:
            if is_fatal(error):
                _raise(txn.fail(error))
            if isinstance(error, _UNKNOWN_OUTCOME_ERRORS) or (
                isinstance(error, KafkaError) and error.code in TXN_RETRY_CODES
            ):
                raise
            if not committed:
                raise
            _raise(self._transaction_failed(error, what, unknown_outcome=False))

    async def _bump_epoch(self, txn: TransactionManager, timeout_s: float) -> None:
        """After an abort with records of unknown outcome: a new epoch restarts the sequence
        numbers (KIP-360), so the next transaction's records cannot clash with them."""
        body = init_producer_id_body(
            txn.transactional_id,
            txn.timeout_ms,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
        )
        try:
            producer_id, epoch = await self._call_transaction_coordinator(
                ApiKey.INIT_PRODUCER_ID, body, read_init_producer_id, timeout_s
            )
        except KafkaError as error:
            if is_fatal(error):
                _raise(txn.fail(error))
            raise
        txn.bumped(producer_id, epoch)
        self._sequences.clear()

    async def _drop_queued(self) -> None:
        """Fail every record not sent yet (the transaction is being aborted)."""
        for queue in list(self._queues.values()):
            dropped = list(queue.batches)
            queue.batches.clear()
            queue.wakeup.set()  # its sender finds nothing and exits
            for batch in dropped:
                self._fail_futures(
                    batch, TransactionAbortedError("the transaction was aborted before delivery")
                )
                self._unfinished -= len(batch.records)
                assert self._unfinished >= 0
                await self._release(batch.size_bytes)
        if self._unfinished == 0:
            self._all_delivered.set()

    async def _wait_registrar(self) -> None:
        if self._registrar is not None:
            await asyncio.gather(self._registrar, return_exceptions=True)

    async def _wait_registered(self, key: tuple[str, int]) -> None:
        """Wait until ``key`` is in the transaction; the partitions senders wait for at the
        same time are added by one AddPartitionsToTxn."""
        future = self._registrations.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._registrations[key] = future
            self._unregistered.append(key)
            if self._registrar is None or self._registrar.done():
                self._registrar = asyncio.ensure_future(self._register_partitions())
        await asyncio.shield(future)

    async def _register_partitions(self) -> None:
        """Add the partitions senders wait for, all of those waiting at once in one request,
        until none waits. Every waiting sender gets the outcome, whatever happens."""
        await asyncio.sleep(0)  # the other senders of this round ask too
        while self._unregistered:
            keys = sorted(set(self._unregistered))
            self._unregistered.clear()
            outcome = await self._add_partitions(keys)
            for key in keys:
                future = self._registrations.pop(key)
                if future.done():
                    continue
                if outcome is None:
                    future.set_result(None)
                else:
                    future.set_exception(outcome)

    async def _add_partitions(self, keys: list[tuple[str, int]]) -> BaseException | None:
        """One AddPartitionsToTxn (retried) for ``keys``; the error the waiting senders get,
        or None when the partitions are in the transaction."""
        txn = self._transaction
        assert txn is not None
        try:
            if not txn.may_send_batch():
                txn.raise_for_batch()  # aborting, or failed: nothing more joins
            await self._call_transaction_coordinator(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                add_partitions_body(
                    txn.transactional_id, txn.producer_id, txn.producer_epoch, keys
                ),
                read_add_partitions,
                None,
                retry_codes=TXN_RETRY_CODES | {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
            )
        except (
            TransactionAbortedError,
            TransactionStateError,
            TransactionAbortRequiredError,
        ) as refused:
            return refused
        except Exception as error:
            return self._transaction_failed(
                error,
                "adding partitions to the transaction",
                unknown_outcome=_outcome_unknown(error),
            )
        if txn.fatal_error is not None:  # fenced meanwhile (by a batch of another partition)
            try:
                txn.raise_for_batch()
            except FluxError as fatal:
                return fatal
        txn.added(keys)  # also while aborting: the abort must then end the transaction
        return None

    async def _send_transactional(self, batch: _Batch) -> int:
        """Send a batch of the running transaction, its partition added to it first."""
        txn = self._transaction
        assert txn is not None and batch.acks == -1
        key = (batch.topic, batch.partition)
        if not txn.may_send_batch():
            txn.raise_for_batch()
        if key not in txn.partitions:
            await self._wait_registered(key)
            if not txn.may_send_batch():
                txn.raise_for_batch()
        sequence = self._sequences.get(key, 0)
        data = build_batch(
            batch.records,
            compression=self.compression,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            base_sequence=sequence,
            is_transactional=True,
        )
        self._sequences[key] = (sequence + len(batch.records)) % _SEQUENCE_MODULUS
        body = {
            "transactional_id": txn.transactional_id,
            "acks": -1,
            "timeout_ms": int(self.delivery_timeout_s * 1000),
            "topic_data": [
                {
                    "name": batch.topic,
                    "partition_data": [{"index": batch.partition, "records": data}],
                }
            ],
        }
        try:
            return await self.client.call_leader(
                batch.topic,
                batch.partition,
                ApiKey.PRODUCE,
                body,
                lambda response, _: _base_offset(response, duplicate_ok=True),
                retry_codes=IDEMPOTENT_RETRY_CODES,
            )
        except FluxError as error:
            # Written or not, nobody knows: the transaction must abort, and the epoch be
            # bumped after it so the sequence numbers start over.
            _raise(txn.fail(error, unknown_outcome=True))

    # -- queueing --------------------------------------------------------------------------

    def _encode(
        self,
        topic: str,
        key: bytes | str | None,
        value: bytes | str | None,
        headers: HeadersInput | None,
        message_id: bytes | str | None,
        timestamp_ms: int | None,
    ) -> tuple[_QueuedRecord, int]:
        """The record as queued and its size in the buffer; ``MessageTooLargeError`` if it
        cannot fit a request, ``ConfigurationError`` for a bad topic, key, value or header."""
        if type(key) is not bytes and key is not None:
            key = as_bytes(key, what="key")
        if type(value) is not bytes and value is not None:
            value = as_bytes(value, what="value")
        encoded_headers = (
            encode_headers(headers, message_id) if headers or message_id is not None else ()
        )
        size = _RECORD_OVERHEAD_BYTES
        if key is not None:
            size += len(key)
        if value is not None:
            size += len(value)
        for name, header_value in encoded_headers:
            size += len(name) + len(header_value or b"") + 10
        if size + _REQUEST_OVERHEAD_BYTES > self.max_request_size:
            raise MessageTooLargeError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"a record of {size} bytes for {topic!r} exceeds max_request_size "
                f"({self.max_request_size} bytes, with request overhead)",
            )
        if type(topic) is not str or not topic:
            raise ConfigurationError(f"topic must be a non-empty string, got {topic!r}")
        return (key, value, encoded_headers, timestamp_ms), size

    async def _prepare(
        self, topic: str, messages: Iterable[MessageInput]
    ) -> tuple[list[_QueuedRecord], list[int], list[int], int]:
        """Encode and check ``send``'s messages: their records, sizes and partitions (-1: the
        sticky partition, chosen as they are queued), and the topic's partition count."""
        records: list[_QueuedRecord] = []
        sizes: list[int] = []
        partitions: list[int] = []
        limit = self.max_request_size - _REQUEST_OVERHEAD_BYTES - _RECORD_OVERHEAD_BYTES
        explicit: list[int] = []  # indices of messages that name their partition
        for item in messages:
            if type(item) is bytes and len(item) <= limit and type(topic) is str and topic:
                records.append((None, item, (), None))  # a bare value: the common bulk case
                sizes.append(_RECORD_OVERHEAD_BYTES + len(item))
                partitions.append(-1)
                continue
            message = as_message(item)
            record, size = self._encode(
                topic,
                message.key,
                message.value,
                message.headers,
                message.id,
                message.timestamp_ms,
            )
            records.append(record)
            sizes.append(size)
            if message.partition is not None:
                explicit.append(len(partitions))
                partitions.append(message.partition)
            else:
                partitions.append(-1 if record[0] is None else -2)
        if not records:
            return records, sizes, partitions, 0
        count = await self.client.partition_count(topic)
        for index in explicit:
            if not 0 <= partitions[index] < count:
                raise UnknownTopicError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"topic {topic!r} has no partition {partitions[index]} (it has {count})",
                )
        for index, partition in enumerate(partitions):
            if partition == -2:
                partitions[index] = partition_for_key(records[index][0], count)  # type: ignore[arg-type]
        return records, sizes, partitions, count

    def _sticky_partition(self, topic: str, count: int) -> int:
        sticky = self._sticky[topic] = self._sticky.get(topic, 0) % count
        return sticky

    def _fit(
        self, topic: str, partition: int, acks: int, sizes: list[int], start: int, end: int
    ) -> int:
        """How many of records ``start`` .. ``end`` (a run for one partition) go into one
        batch: at least one, then as many as fit the batch, its record limit and the buffer."""
        queue = self._queues.get((topic, partition))
        batch = queue.batches[-1] if queue is not None and queue.batches else None
        if batch is None or not self._takes(batch, acks, sizes[start], 1):
            used_bytes, used_records = 0, 0  # they will open a new batch
        else:
            used_bytes, used_records = batch.size_bytes, len(batch.records)
        room_bytes = min(self.batch_size - used_bytes, self.buffer_memory) - sizes[start]
        room_records = limits.SEND_BATCH_RECORDS_MAX - used_records - 1
        taken = 1
        while start + taken < end and taken <= room_records:
            room_bytes -= sizes[start + taken]
            if room_bytes < 0:
                break
            taken += 1
        return taken

    def _takes(self, batch: _Batch, acks: int, size: int, count: int) -> bool:
        """Whether ``count`` more records of ``size`` bytes in all may join ``batch``."""
        return (
            not batch.closed
            and batch.acks == acks
            and batch.size_bytes + size <= self.batch_size
            and len(batch.records) + count <= limits.SEND_BATCH_RECORDS_MAX
        )

    def _add_run(
        self, topic: str, partition: int, acks: int, records: list[_QueuedRecord], size: int
    ) -> tuple[_Batch, int, bool]:
        """Add records (their buffer space reserved) to their partition's open batch, opening
        one if they do not fit it. Returns the batch, the index of the first of them in it,
        and whether a batch is ready to go (so the caller should let the senders run)."""
        queue = self._queues.get((topic, partition))
        if queue is None:
            queue = self._queues[(topic, partition)] = _PartitionQueue()
        batch = queue.batches[-1] if queue.batches else None
        ready = False
        if batch is None or not self._takes(batch, acks, size, len(records)):
            if batch is not None and not batch.closed:
                batch.closed = True
                ready = True
            batch = _Batch(topic, partition, acks, created_at=time.monotonic())
            queue.batches.append(batch)
        first_index = len(batch.records)
        batch.records.extend(records)
        batch.futures.extend([None] * len(records))
        if not batch.keyless and any(record[0] is None for record in records):
            batch.keyless = True
        batch.size_bytes += size
        if batch.size_bytes >= self.batch_size:
            batch.closed = True
            ready = True
        if ready or self.linger_s == 0 or self._flushing:
            queue.wakeup.set()
        if queue.sender is None or queue.sender.done():
            queue.sender = asyncio.ensure_future(self._run_sender(queue))
            queue.wakeup.set()
        return batch, first_index, ready

    def _cached_partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        """The partition for a record from cached metadata, without awaiting; -1 when the
        metadata must be fetched or an explicit partition checked first."""
        if partition is not None:
            return -1
        metadata = self.client.metadata
        cached = metadata.snapshot.topics.get(topic)
        if cached is None or metadata.needs_refresh():
            return -1
        count = len(cached.partitions)
        if key is not None:
            return partition_for_key(key, count)
        sticky = self._sticky[topic] = self._sticky.get(topic, 0) % count
        return sticky

    async def _partition_slowly(self, topic: str, key: bytes | None, partition: int | None) -> int:
        if partition is None:
            return await self.partition_for(topic, key)
        count = await self.client.partition_count(topic)
        if not 0 <= partition < count:
            raise UnknownTopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {topic!r} has no partition {partition} (it has {count})",
            )
        return partition

    def _note_queued(self, count: int) -> None:
        if self._unfinished == 0:
            self._all_delivered.clear()
        self._unfinished += count

    async def _reserve(self, size: int) -> None:
        if self._buffered_bytes + size <= self.buffer_memory and not self._buffer_space._waiters:
            self._buffered_bytes += size  # room, and nobody waits before us: no lock round trip
            return
        async with self._buffer_space:
            await self._buffer_space.wait_for(
                lambda: (
                    self._buffered_bytes == 0 or self._buffered_bytes + size <= self.buffer_memory
                )
            )
            self._buffered_bytes += size

    async def _release(self, size: int) -> None:
        if not self._buffer_space._waiters:
            self._buffered_bytes -= size  # nobody to wake: no lock round trip
            assert self._buffered_bytes >= 0
            return
        async with self._buffer_space:
            self._buffered_bytes -= size
            assert self._buffered_bytes >= 0
            self._buffer_space.notify_all()

    def _append(
        self,
        topic: str,
        partition: int,
        acks: int,
        record: _QueuedRecord,
        size: int,
        future: asyncio.Future[RecordMetadata] | None,
    ) -> bool:
        """Add ``record`` to its partition's open batch (opening one as needed); True when a
        batch is ready to go, so the caller should let the senders run."""
        queue = self._queues.get((topic, partition))
        if queue is None:
            queue = self._queues[(topic, partition)] = _PartitionQueue()
        batch = queue.batches[-1] if queue.batches else None
        ready = False
        if (
            batch is None
            or batch.closed
            or batch.acks != acks
            or batch.size_bytes + size > self.batch_size
            or len(batch.records) >= limits.SEND_BATCH_RECORDS_MAX
        ):
            if batch is not None and not batch.closed:
                batch.closed = True
                queue.wakeup.set()
                ready = True
            batch = _Batch(topic, partition, acks, created_at=time.monotonic())
            queue.batches.append(batch)
        batch.records.append(record)
        if record[0] is None:
            batch.keyless = True
        batch.futures.append(future)
        batch.size_bytes += size
        if batch.size_bytes >= self.batch_size:
            batch.closed = True
            queue.wakeup.set()
            ready = True
        if self.linger_s == 0 or self._flushing:
            queue.wakeup.set()
        if queue.sender is None or queue.sender.done():
            queue.sender = asyncio.ensure_future(self._run_sender(queue))
            queue.wakeup.set()
        return ready

    # -- sending ---------------------------------------------------------------------------

    async def _run_sender(self, queue: _PartitionQueue) -> None:
        """Send this partition's batches one at a time, each when it is full, has lingered
        long enough, or a flush asks for it. Exits when the queue stays empty."""
        while True:
            if not queue.batches:
                return
            head = queue.batches[0]
            if not (head.closed or len(queue.batches) > 1 or self._flushing or self._closed):
                remaining_s = head.created_at + self.linger_s - time.monotonic()
                if remaining_s > 0:
                    queue.wakeup.clear()
                    try:
                        async with asyncio.timeout(remaining_s):
                            await queue.wakeup.wait()
                    except TimeoutError:
                        pass
                    continue
            head.closed = True
            queue.batches.popleft()
            if head.keyless and self._sticky.get(head.topic) == head.partition:
                self._sticky[head.topic] = head.partition + 1  # the next keyless batch moves on
            async with self._in_flight:
                await self._deliver(head)

    @staticmethod
    def _fail_futures(batch: _Batch, error: BaseException) -> None:
        for future in batch.futures:
            if future is not None and not future.done():
                future.set_exception(error)
        for shared in batch.shared:
            if not shared.done():
                shared.set_exception(error)

    async def _deliver(self, batch: _Batch) -> None:
        try:
            if self._transaction is not None:
                base_offset = await self._send_transactional(batch)
            else:
                base_offset = await self._send_batch(batch)
        except Exception as error:  # every outcome goes to the futures, none is lost
            self._fail_futures(batch, error)
        else:
            topic, partition = batch.topic, batch.partition
            offset = base_offset
            for future in batch.futures:
                if future is not None and not future.done():
                    future.set_result(RecordMetadata(topic, partition, offset))
                if base_offset >= 0:
                    offset += 1
            for shared in batch.shared:
                if not shared.done():
                    shared.set_result(base_offset)
        finally:
            self._unfinished -= len(batch.records)
            assert self._unfinished >= 0
            if self._unfinished == 0:
                self._all_delivered.set()
            await self._release(batch.size_bytes)

    async def _send_batch(self, batch: _Batch) -> int:
        idempotent = self.idempotent and batch.acks == -1
        if idempotent:
            await self._ensure_producer_id()
            key = (batch.topic, batch.partition)
            sequence = self._sequences.get(key, 0)
            data = build_batch(
                batch.records,
                compression=self.compression,
                producer_id=self._producer_id,
                producer_epoch=self._producer_epoch,
                base_sequence=sequence,
            )
            self._sequences[key] = (sequence + len(batch.records)) % _SEQUENCE_MODULUS
        else:
            data = build_batch(batch.records, compression=self.compression)
        body = {
            "transactional_id": None,
            "acks": batch.acks,
            "timeout_ms": int(self.delivery_timeout_s * 1000),
            "topic_data": [
                {
                    "name": batch.topic,
                    "partition_data": [{"index": batch.partition, "records": data}],
                }
            ],
        }
        if batch.acks == 0:
            await self.client.call_leader(
                batch.topic,
                batch.partition,
                ApiKey.PRODUCE,
                body,
                lambda _r, _v: None,
                expect_response=False,
            )
            return -1
        try:
            return await self.client.call_leader(
                batch.topic,
                batch.partition,
                ApiKey.PRODUCE,
                body,
                lambda response, _: _base_offset(response, duplicate_ok=idempotent),
                retry_codes=IDEMPOTENT_RETRY_CODES if idempotent else LEADER_RETRY_CODES,
            )
        except FluxError:
            if idempotent:
                # Written or not, nobody knows: a fresh producer id keeps later batches apart.
                self._producer_id = -1
                self._producer_epoch = -1
                self._sequences.clear()
            raise

    async def _ensure_producer_id(self) -> None:
        async with self._producer_id_lock:
            if self._producer_id >= 0:
                return
            body = {
                "transactional_id": None,
                "transaction_timeout_ms": 60_000,
                "producer_id": -1,
                "producer_epoch": -1,
            }
            self._producer_id, self._producer_epoch = await self.client.call_any(
                ApiKey.INIT_PRODUCER_ID,
                body,
                _read_producer_id,
                retry_codes=COORDINATOR_RETRY_CODES,
            )
            self._sequences.clear()


def _outcome_unknown(error: BaseException) -> bool:
    """Whether a failed transaction request may have been applied by the coordinator (it
    timed out, or retriable errors ran out): the producer then bumps its epoch after the
    abort, which ends whatever the coordinator holds."""
    if isinstance(error, _UNKNOWN_OUTCOME_ERRORS):
        return True
    return isinstance(error, KafkaError) and error.retriable


def _raise(failure: BaseException) -> NoReturn:
    """Raise a transaction failure with the cause it carries (the error it stands for), not
    the exception being handled where it is raised."""
    raise failure from failure.__cause__


def _is_iterable_of_messages(messages: object) -> bool:
    if messages is None or isinstance(messages, (bytes, bytearray, memoryview, str, Message)):
        return False
    if isinstance(messages, dict):
        return False
    return hasattr(messages, "__iter__")


def _call_back(callback: DeliveryCallback, future: asyncio.Future[RecordMetadata]) -> None:
    if future.cancelled():
        callback(FluxError("delivery was cancelled"), None)
    elif future.exception() is not None:
        error = future.exception()
        callback(error if isinstance(error, Exception) else FluxError(str(error)), None)
    else:
        callback(None, future.result())


def _read_producer_id(response: dict[str, Any], _: int) -> tuple[int, int]:
    code = ErrorCode.from_code(response["error_code"])
    if code is not ErrorCode.NONE:
        raise error_for(code, f"InitProducerId: {code.message}")
    return int(response["producer_id"]), int(response["producer_epoch"])


def _base_offset(response: dict[str, Any], *, duplicate_ok: bool = False) -> int:
    """The base offset of the one batch sent; with ``duplicate_ok`` a batch the broker had
    already written (DUPLICATE_SEQUENCE_NUMBER) counts as delivered."""
    (topic,) = response["responses"]
    (result,) = topic["partition_responses"]
    code = result["error_code"]
    if duplicate_ok and code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
        return int(result["base_offset"])
    if code != ErrorCode.NONE:
        error_code = ErrorCode.from_code(code)
        message = result.get("error_message") or (
            f"{topic['name']}-{result['index']}: {error_code.message}"
        )
        raise error_for(error_code, message)
    return int(result["base_offset"])


# -- the synchronous twin ---------------------------------------------------------------------


class Producer:
    """The blocking twin of ``AsyncProducer`` (same arguments, same methods): ``produce``
    returns a ``concurrent.futures.Future``; ``send``, ``flush`` and ``close`` block."""

    def __init__(self, bootstrap: str, **options: Any) -> None:
        self._async = AsyncProducer(bootstrap, **options)
        self._loop = LoopThread("flux-producer")

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def acks(self) -> int:
        return self._async.acks

    @property
    def idempotent(self) -> bool:
        return self._async.idempotent

    @property
    def client(self) -> Any:
        """The client underneath, as a blocking ``SyncProxy`` (for tools and tests)."""
        return SyncProxy(self._async.client, self._loop)

    def run_async(self, coroutine: Any) -> Any:
        """Run a coroutine on this producer's event loop and wait for it."""
        return self._loop.run(coroutine)

    def partition_for(self, topic: str, key: bytes | str | None) -> int:
        return self._loop.run(self._async.partition_for(topic, key))

    def produce(
        self, topic: str, value: bytes | str | None = None, **options: Any
    ) -> concurrent.futures.Future[RecordMetadata]:
        """Queue one record (``AsyncProducer.produce``'s keywords); a future of its metadata."""

        async def queue() -> concurrent.futures.Future[RecordMetadata]:
            delivered = await self._async.produce(topic, value, **options)
            result: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
            delivered.add_done_callback(lambda done: _copy_outcome(done, result))
            return result

        return self._loop.run(queue())

    def send(
        self,
        topic: str,
        messages: MessageInput | Iterable[MessageInput],
        *,
        acks: int | str | None = None,
    ) -> Any:
        """``AsyncProducer.send``, blocking."""
        if not isinstance(messages, (list, tuple)) and _is_iterable_of_messages(messages):
            messages = list(messages)  # type: ignore[arg-type]
        return self._loop.run(self._async.send(topic, messages, acks=acks))

    def flush(self, timeout_s: float | None = None) -> None:
        self._loop.run(self._async.flush(timeout_s))

    @property
    def transactional_id(self) -> str | None:
        return self._async.transactional_id

    def init_transactions(self, timeout_s: float | None = None) -> None:
        """``AsyncProducer.init_transactions``, blocking."""
        self._loop.run(self._async.init_transactions(timeout_s))

    def begin_transaction(self) -> None:
        self._loop.run(self._async.begin_transaction())

    def send_offsets_to_transaction(
        self, offsets: Any, group: str | ConsumerGroupMetadata, timeout_s: float | None = None
    ) -> None:
        """``AsyncProducer.send_offsets_to_transaction``, blocking."""
        self._loop.run(self._async.send_offsets_to_transaction(offsets, group, timeout_s))

    def commit_transaction(self, timeout_s: float | None = None) -> None:
        """``AsyncProducer.commit_transaction``, blocking."""
        self._loop.run(self._async.commit_transaction(timeout_s))

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        """``AsyncProducer.abort_transaction``, blocking."""
        self._loop.run(self._async.abort_transaction(timeout_s))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Producer]:
        """``with producer.transaction():`` begins, commits at the end of the block, aborts
        when the block or the commit raises (``AsyncProducer.transaction``)."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            self._loop.run(self._async._abort_after_error())
            raise
        try:
            self.commit_transaction()
        except BaseException:
            self._loop.run(self._async._abort_after_error())
            raise

    def close(self, timeout_s: float | None = None) -> None:
        try:
            self._loop.run(self._async.close(timeout_s))
        finally:
            self._loop.close()


def _copy_outcome(
    done: asyncio.Future[RecordMetadata], result: concurrent.futures.Future[RecordMetadata]
) -> None:
    if done.cancelled():
        result.cancel()
    elif done.exception() is not None:
        result.set_exception(done.exception())  # type: ignore[arg-type]
    else:
        result.set_result(done.result())
