"""The transaction coordinator: transactional ids, their producer ids and epochs, and the
transactions they run, stored in ``__transaction_state`` (Kafka's ``TransactionCoordinator``).

The coordinator of transactional id ``t`` is the leader of partition
``partition_for_txn(t, N)`` of the compacted internal topic ``__transaction_state`` (created,
like ``__consumer_offsets``, on the first FindCoordinator that asks for it). Every state change
of an id is a record there, appended and acknowledged by the in-sync replicas (acks=all)
before the client hears of it; a broker that becomes the leader of such a partition replays it
and takes over: transactions it finds in ``PrepareCommit``/``PrepareAbort`` get their markers
written, and running ones keep their timeouts.

**Ending a transaction** (EndTxn): ``Ongoing -> Prepare*`` is written first (that is the
decision), then the marker (``protocol.control``) goes to the leader of
every partition of the transaction -- here by ``Partition.write_txn_marker``, elsewhere over the
internal transport (``POST /internal/txn-markers``, Kafka's WriteTxnMarkers) -- and waits for its
in-sync replicas; when all are written, ``Complete*`` is, and the client is answered (after
at most ``END_TXN_WAIT_S``: the decision stands whether or not the markers are done). A
partition whose leader cannot be
reached is retried with backoff until it answers or this broker stops coordinating the id; a
deleted partition needs no marker. Until ``Complete*``, the id's next AddPartitionsToTxn,
EndTxn or InitProducerId is answered ``CONCURRENT_TRANSACTIONS`` (clients retry).

**Fencing.** InitProducerId for an id bumps its epoch (a new producer id when the epoch is
exhausted) and, if a transaction was running, aborts it first with the bumped epoch: the
markers raise the producer's epoch on every partition it wrote to, so the old producer (a
zombie) is refused there (``INVALID_PRODUCER_EPOCH``) and by this coordinator
(``PRODUCER_FENCED``). A transaction open longer than its ``transaction.timeout.ms`` is aborted
the same way (epoch bumped), checked every ``ABORT_CHECK_INTERVAL_S``.

**Verification** (KIP-890 part 1, Kafka 3.6's ``transaction.partition.verification.enable``):
a partition leader that receives a producer's first transactional batch of a transaction asks
the id's coordinator (``verify``: here, or ``POST /internal/txn-verify``) whether the partition
is in that producer's running transaction; a batch for a partition never added with
AddPartitionsToTxn (a buggy client, or a zombie's late retry after its transaction ended) is
refused instead of opening a transaction there that nothing would ever end, which would hold
every ``read_committed`` reader of the partition back for good.

**Expiration** (Kafka's ``transactional.id.expiration.ms``, ``broker.
transactional_id_expiration_ms``, 7 days by default): an id with no transaction running or
ending (``Empty``, ``CompleteCommit``, ``CompleteAbort``) whose state has not changed for that
long is removed: a tombstone is written to ``__transaction_state`` (acks=all), so compaction
drops its records and a coordinator that loads the partition later does not bring it back.
Applications that make up a transactional id per run (or per task) would otherwise grow the
coordinators' memory and the topic for ever. A producer that comes back with an expired id
starts afresh (a new producer id), as in Kafka. Checked with the timeouts.

Transactions of one id are serialized by a lock per id. Thread-safety: one owner, the broker's
event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from flux.controller.image import MetadataImage
from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.protocol.records import build_batch, decode_records, iter_batches

from ..kafka.producer_ids import MAX_PRODUCER_EPOCH, ProducerIdManager, ProducerIdUnavailableError
from ..replication.partition import Partition, ProducerRejectedError
from ..replication.peers import BrokerPeers, PeerUnavailableError
from ..replication.replica_manager import ReplicaManager
from .state import (
    TxnMetadata,
    TxnState,
    decode_record,
    encode_record,
    partition_for_txn,
    record_key,
)

__all__ = ["MARKERS_PATH", "TXN_TOPIC", "VERIFY_PATH", "TransactionCoordinator"]

log = logging.getLogger("flux.cluster.transactions")

TXN_TOPIC = "__transaction_state"
MARKERS_PATH = "/internal/txn-markers"
VERIFY_PATH = "/internal/txn-verify"
#: How long a partition leader waits for a remote coordinator's verification.
VERIFY_TIMEOUT_S = 5.0
WRITE_TIMEOUT_S = 10.0
LOAD_READ_BYTES = 8 << 20
ABORT_CHECK_INTERVAL_S = 1.0
#: When an abort or expiration could not be written, it is tried again this much later.
ABORT_RETRY_MS = 1000
MARKER_RETRY_MIN_S = 0.05
MARKER_RETRY_MAX_S = 2.0
#: How long EndTxn waits for the markers before answering (the decision is written already).
END_TXN_WAIT_S = 5.0
#: Kafka's ``transaction.max.timeout.ms`` default (15 minutes).
MAX_TIMEOUT_MS = 900_000
#: Kafka's ``transactional.id.expiration.ms`` default (7 days).
DEFAULT_EXPIRATION_MS = 7 * 24 * 3600 * 1000
#: States in which an id may expire: no transaction running or ending.
_EXPIRABLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})

Errors = ErrorCode


def _now_ms() -> int:
    return int(time.time() * 1000)


def _error_code(value: Any) -> ErrorCode:
    try:
        return ErrorCode(int(value))
    except (TypeError, ValueError):
        return ErrorCode.UNKNOWN_SERVER_ERROR


#: Errors of a ``__transaction_state`` write that leave this broker its coordinator.
_RETRIABLE_WRITE_ERRORS = frozenset(
    {
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)


class _Refused(Exception):
    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


class TransactionCoordinator:
    """The transactional ids of the ``__transaction_state`` partitions this broker leads."""

    def __init__(
        self,
        replicas: ReplicaManager,
        producer_ids: ProducerIdManager,
        *,
        peers: Callable[[], BrokerPeers],
        create_topic: Callable[[], Awaitable[None]],
        on_marker: Callable[[str, int, int, bool], None] | None = None,
        expiration_ms: int = DEFAULT_EXPIRATION_MS,
    ) -> None:
        """``on_marker(topic, partition, producer id, commit)``: a marker this broker wrote
        (as the partition's leader) is replicated; the group coordinator makes the
        transaction's offsets visible or drops them. ``expiration_ms``: how long an id with
        no transaction lives on unchanged (``transactional_id_expiration_ms``)."""
        self._expiration_ms = expiration_ms
        self._replicas = replicas
        self._on_marker = on_marker
        self._producer_ids = producer_ids
        self._peers = peers
        self._create_topic = create_topic
        #: partition index -> its coordinator epoch (the partition's leader epoch at load).
        self._loaded: dict[int, int] = {}
        self._txns: dict[str, TxnMetadata] = {}
        #: When something may fall due for an id (its transaction's timeout, its expiration):
        #: ``(due ms, id)`` entries, the valid one of each id also in ``_due_at``. The check
        #: each second looks at what is due, not at every id.
        self._due: list[tuple[int, str]] = []
        self._due_at: dict[str, int] = {}
        #: transactional id -> its lock and how many hold or wait for it (``_lock``).
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._completions: dict[str, asyncio.Task[None]] = {}
        self._timeouts: asyncio.Task[None] | None = None
        self._stopped = False
        replicas.add_image_listener(self._on_image)

    # -- ownership ----------------------------------------------------------------------------

    def _partition_count(self) -> int:
        topic = self._replicas.image.topics.get(TXN_TOPIC)
        return len(topic.partitions) if topic is not None else 0

    def partition_of(self, transactional_id: str) -> int | None:
        count = self._partition_count()
        return partition_for_txn(transactional_id, count) if count else None

    def coordinator_of(self, transactional_id: str) -> int | None:
        """The broker coordinating ``transactional_id`` (None: no topic or no leader)."""
        index = self.partition_of(transactional_id)
        if index is None:
            return None
        leader = self._replicas.image.topics[TXN_TOPIC].partitions[index].leader
        return leader if leader >= 0 else None

    async def ensure_topic(self) -> None:
        if not self._partition_count():
            await self._create_topic()

    def _on_image(self, image: MetadataImage) -> None:
        count = self._partition_count()
        for index in range(count):
            partition = self._replicas.partition(TXN_TOPIC, index)
            leads = partition is not None and partition.is_leader
            if leads and self._loaded.get(index) != (partition.leader_epoch if partition else -2):
                assert partition is not None
                self._load(partition)
            elif not leads and index in self._loaded:
                self._unload(index)
        for index in [i for i in self._loaded if i >= count]:
            self._unload(index)

    def _load(self, partition: Partition) -> None:
        """Replay one partition of ``__transaction_state`` and take over its ids."""
        loaded: dict[str, TxnMetadata | None] = {}
        offset = partition.log.log_start_offset
        while offset < partition.log_end_offset:
            data = partition.log.read(offset, LOAD_READ_BYTES)
            if not data:
                break
            for header, raw in iter_batches(data):
                try:
                    records = [] if header.is_control else decode_records(bytes(raw))
                except CorruptRecordError as error:
                    log.error("%s-%d: skipping a batch: %s", TXN_TOPIC, partition.index, error)
                    records = []
                for record in records:
                    if record.offset >= offset and record.key is not None:
                        try:
                            transactional_id, metadata = decode_record(record.key, record.value)
                        except (ValueError, KeyError, TypeError) as error:
                            log.error("%s-%d: bad record: %r", TXN_TOPIC, partition.index, error)
                            continue
                        loaded[transactional_id] = metadata
                offset = max(offset, header.last_offset + 1)
        self._loaded[partition.index] = partition.leader_epoch
        for transactional_id, metadata in loaded.items():
            if metadata is None:
                self._forget(transactional_id)
                continue
            self._set(metadata)
            if metadata.state.preparing:
                self._complete_later(metadata)
        log.info(
            "coordinating %s-%d (epoch %d): %d transactional ids loaded",
            TXN_TOPIC,
            partition.index,
            partition.leader_epoch,
            sum(1 for m in loaded.values() if m is not None),
        )
        if self._timeouts is None or self._timeouts.done():
            self._timeouts = asyncio.get_running_loop().create_task(self._abort_timed_out())

    def _unload(self, index: int) -> None:
        self._loaded.pop(index, None)
        for transactional_id in [t for t in self._txns if self.partition_of(t) in (index, None)]:
            self._forget(transactional_id)
            task = self._completions.pop(transactional_id, None)
            if task is not None:
                task.cancel()
        log.info("no longer coordinating %s-%d", TXN_TOPIC, index)

    async def stop(self) -> None:
        self._stopped = True
        tasks = [*self._completions.values(), *([self._timeouts] if self._timeouts else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._completions.clear()

    def _owner(self, transactional_id: str) -> tuple[Partition, int]:
        """The ``__transaction_state`` partition holding the id, led and loaded here, and its
        coordinator epoch; ``_Refused(NOT_COORDINATOR)`` otherwise."""
        index = self.partition_of(transactional_id)
        partition = None if index is None else self._replicas.partition(TXN_TOPIC, index)
        if partition is None or not partition.is_leader or index not in self._loaded:
            raise _Refused(ErrorCode.NOT_COORDINATOR)
        return partition, self._loaded[index]

    @contextlib.asynccontextmanager
    async def _lock(self, transactional_id: str) -> AsyncIterator[None]:
        """Hold the id's lock (its operations are serialized). The lock is dropped once nobody
        holds or waits for it, so ids that come and go (expired ones) leave nothing behind."""
        lock, users = self._locks.get(transactional_id, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[transactional_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            users = self._locks[transactional_id][1] - 1
            if users:
                self._locks[transactional_id] = (lock, users)
            else:
                del self._locks[transactional_id]

    async def _persist(self, partition: Partition, metadata: TxnMetadata) -> None:
        """Write ``metadata`` (acks=all); on success it is the id's state here."""
        await self._write(partition, *encode_record(metadata))
        self._set(metadata)

    def _set(self, metadata: TxnMetadata) -> None:
        """Make ``metadata`` its id's state here, and schedule what may fall due for it."""
        transactional_id = metadata.transactional_id
        self._txns[transactional_id] = metadata
        due = self._due_ms(metadata)
        if due is None:
            self._due_at.pop(transactional_id, None)
        else:
            self._schedule(transactional_id, due)

    def _forget(self, transactional_id: str) -> None:
        """No state for the id here any more (a tombstone, an expiry, an unloaded partition)."""
        self._txns.pop(transactional_id, None)
        self._due_at.pop(transactional_id, None)

    def _due_ms(self, metadata: TxnMetadata) -> int | None:
        """When the id's transaction times out (running) or the id expires (no transaction),
        None if neither can happen in its state."""
        if metadata.state is TxnState.ONGOING and metadata.start_ms >= 0:
            return metadata.start_ms + metadata.timeout_ms + 1
        if metadata.state in _EXPIRABLE and metadata.update_ms >= 0:
            return metadata.update_ms + self._expiration_ms
        return None

    def _schedule(self, transactional_id: str, due_ms: int) -> None:
        self._due_at[transactional_id] = due_ms
        heapq.heappush(self._due, (due_ms, transactional_id))
        if len(self._due) > 2 * len(self._due_at) + 64:
            # Mostly superseded entries (each state change adds one): keep the valid ones.
            self._due = [(due, tid) for tid, due in self._due_at.items()]
            heapq.heapify(self._due)

    async def _write(self, partition: Partition, key: bytes, value: bytes | None) -> None:
        """Append one record to ``partition`` and wait for its in-sync replicas."""
        try:
            result = partition.append_as_leader(build_batch([(key, value, ())]))
        except (ProducerRejectedError, CorruptRecordError, OSError) as error:
            log.error("cannot write %s-%d: %s", TXN_TOPIC, partition.index, error)
            raise _Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE) from None
        waiter = partition.add_delayed_produce(result.last_offset + 1)
        try:
            code = await asyncio.wait_for(waiter, WRITE_TIMEOUT_S)
        except TimeoutError:
            raise _Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE) from None
        if code in _RETRIABLE_WRITE_ERRORS:
            # Still the leader, but the ISR is short of min.insync.replicas (or slow): as in
            # Kafka, the coordinator is briefly unavailable, not moved.
            raise _Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if code != ErrorCode.NONE:
            raise _Refused(ErrorCode.NOT_COORDINATOR)

    # -- InitProducerId -----------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        """``(error, producer id, epoch)`` for a transactional producer (re)starting."""
        if not 1 <= timeout_ms <= MAX_TIMEOUT_MS:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        try:
            partition, _epoch = self._owner(transactional_id)
            async with self._lock(transactional_id):
                metadata = self._txns.get(transactional_id)
                if metadata is not None and metadata.state.preparing:
                    raise _Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
                if metadata is not None and producer_id >= 0:
                    known = (metadata.producer_id, metadata.producer_epoch)
                    before = (metadata.last_producer_id, metadata.last_producer_epoch)
                    if (producer_id, producer_epoch) not in (known, before):
                        raise _Refused(ErrorCode.PRODUCER_FENCED)
                now = _now_ms()
                if metadata is None:
                    new_id = await self._next_producer_id()
                    metadata = TxnMetadata(
                        transactional_id, new_id, 0, timeout_ms, start_ms=-1, update_ms=now
                    )
                    await self._persist(partition, metadata)
                    return ErrorCode.NONE, metadata.producer_id, metadata.producer_epoch
                bumped = await self._bumped(metadata)
                if metadata.state is TxnState.ONGOING:
                    # A running transaction of the previous producer: aborted with the new
                    # epoch (fencing it everywhere); the client retries once it completed.
                    aborting = bumped.moved(TxnState.PREPARE_ABORT, update_ms=now)
                    await self._persist(partition, aborting)
                    self._complete_later(aborting)
                    raise _Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
                ready = bumped.moved(
                    TxnState.EMPTY, timeout_ms=timeout_ms, partitions=(), start_ms=-1, update_ms=now
                )
                await self._persist(partition, ready)
                return ErrorCode.NONE, ready.producer_id, ready.producer_epoch
        except _Refused as refused:
            return refused.error, -1, -1

    async def _next_producer_id(self) -> int:
        try:
            return await self._producer_ids.next_producer_id()
        except ProducerIdUnavailableError:
            raise _Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE) from None

    async def _bumped(self, metadata: TxnMetadata) -> TxnMetadata:
        """The metadata with the next epoch (a fresh producer id when the epoch is spent),
        remembering the previous id and epoch."""
        if metadata.producer_epoch + 1 >= MAX_PRODUCER_EPOCH:
            producer_id, epoch = await self._next_producer_id(), 0
        else:
            producer_id, epoch = metadata.producer_id, metadata.producer_epoch + 1
        return TxnMetadata(
            metadata.transactional_id,
            producer_id,
            epoch,
            metadata.timeout_ms,
            metadata.state,
            metadata.partitions,
            last_producer_id=metadata.producer_id,
            last_producer_epoch=metadata.producer_epoch,
            start_ms=metadata.start_ms,
            update_ms=metadata.update_ms,
        )

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------

    def _checked(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        metadata = self._txns.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            raise _Refused(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if producer_epoch != metadata.producer_epoch:
            raise _Refused(ErrorCode.PRODUCER_FENCED)
        if metadata.state.preparing:
            raise _Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
        return metadata

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
    ) -> ErrorCode | dict[tuple[str, int], ErrorCode]:
        """Add partitions to the running transaction (starting one): an error for the whole
        request, or one per partition (``UNKNOWN_TOPIC_OR_PARTITION`` for those that do not
        exist, and then ``OPERATION_NOT_ATTEMPTED`` for the others, as Kafka)."""
        image = self._replicas.image
        unknown = {
            (topic, index)
            for topic, index in partitions
            if topic not in image.topics or not 0 <= index < len(image.topics[topic].partitions)
        }
        if unknown:
            return {
                item: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if item in unknown
                else ErrorCode.OPERATION_NOT_ATTEMPTED
                for item in partitions
            }
        try:
            partition, _epoch = self._owner(transactional_id)
            async with self._lock(transactional_id):
                metadata = self._checked(transactional_id, producer_id, producer_epoch)
                merged = tuple(sorted(set(metadata.partitions) | set(partitions)))
                now = _now_ms()
                running = metadata.state is TxnState.ONGOING
                if not (running and merged == metadata.partitions):
                    await self._persist(
                        partition,
                        metadata.moved(
                            TxnState.ONGOING,
                            partitions=merged,
                            start_ms=metadata.start_ms if running else now,
                            update_ms=now,
                        ),
                    )
        except _Refused as refused:
            return refused.error
        return dict.fromkeys(partitions, ErrorCode.NONE)

    # -- EndTxn -------------------------------------------------------------------------------

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        try:
            partition, _epoch = self._owner(transactional_id)
            async with self._lock(transactional_id):
                metadata = self._txns.get(transactional_id)
                if metadata is None or metadata.producer_id != producer_id:
                    raise _Refused(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
                if producer_epoch != metadata.producer_epoch:
                    # A retry of the EndTxn that ended this epoch's transaction by timeout or
                    # re-init is fenced like any older producer.
                    raise _Refused(ErrorCode.PRODUCER_FENCED)
                if metadata.state is done:
                    return ErrorCode.NONE  # a retry of an EndTxn that completed
                if metadata.state is target:
                    raise _Refused(ErrorCode.CONCURRENT_TRANSACTIONS)  # still writing markers
                if metadata.state is not TxnState.ONGOING:
                    raise _Refused(ErrorCode.INVALID_TXN_STATE)
                deciding = metadata.moved(target, update_ms=_now_ms())
                await self._persist(partition, deciding)
                completion = self._complete_later(deciding)
        except _Refused as refused:
            return refused.error
        # The decision is durable: the answer is NONE whatever happens next. It waits (a
        # while) for the markers, so that the producer's next transaction does not begin with
        # CONCURRENT_TRANSACTIONS and a client back-off.
        try:
            await asyncio.wait_for(asyncio.shield(completion), END_TXN_WAIT_S)
        except (TimeoutError, asyncio.CancelledError):
            pass  # still being completed (or by the next coordinator)
        except Exception:
            log.exception("completing transaction %s failed", transactional_id)
        return ErrorCode.NONE

    def _complete_later(self, metadata: TxnMetadata) -> asyncio.Task[None]:
        """Write the markers of a prepared transaction, then its ``Complete*`` state."""
        transactional_id = metadata.transactional_id
        running = self._completions.get(transactional_id)
        if running is not None and not running.done():
            return running
        task = asyncio.get_running_loop().create_task(self._complete(metadata))
        self._completions[transactional_id] = task
        return task

    async def _complete(self, metadata: TxnMetadata) -> None:
        """Markers, then ``Complete*``. Writing ``Complete*`` is retried while this broker still
        coordinates the id and the write is only refused for now (the ISR short of its
        minimum, as right after a failover): given up, the transaction would stay prepared,
        and every later request of its id answered ``CONCURRENT_TRANSACTIONS``, for good."""
        transactional_id = metadata.transactional_id
        commit = metadata.state is TxnState.PREPARE_COMMIT
        state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        delay_s = MARKER_RETRY_MIN_S
        try:
            await self._write_markers(metadata, commit)
            while True:
                async with self._lock(transactional_id):
                    current = self._txns.get(transactional_id)
                    if current != metadata:
                        return  # no longer ours, or changed meanwhile (cannot while preparing)
                    partition, _epoch = self._owner(transactional_id)
                    try:
                        await self._persist(
                            partition, metadata.moved(state, partitions=(), update_ms=_now_ms())
                        )
                        return
                    except _Refused as refused:
                        if refused.error != ErrorCode.COORDINATOR_NOT_AVAILABLE:
                            raise
                log.info(
                    "transaction %s: writing %s failed for now; retrying", transactional_id, state
                )
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, MARKER_RETRY_MAX_S)
        except _Refused as refused:
            # This broker stopped coordinating the id: the next coordinator finishes it.
            log.info("transaction %s not completed here: %s", transactional_id, refused.error)
        finally:
            if self._completions.get(transactional_id) is asyncio.current_task():
                del self._completions[transactional_id]

    async def _write_markers(self, metadata: TxnMetadata, commit: bool) -> None:
        """Write the marker to every partition of the transaction, retrying each until its
        leader wrote it (or the partition is gone)."""
        remaining = set(metadata.partitions)
        delay_s = MARKER_RETRY_MIN_S
        while remaining:
            _partition, coordinator_epoch = self._owner(metadata.transactional_id)
            by_leader: dict[int, list[tuple[str, int]]] = {}
            image = self._replicas.image
            for topic, index in sorted(remaining):
                described = image.topics.get(topic)
                if described is None or index >= len(described.partitions):
                    remaining.discard((topic, index))  # deleted: nothing to mark
                    continue
                by_leader.setdefault(described.partitions[index].leader, []).append((topic, index))
            answers = await asyncio.gather(
                *(
                    self._markers_at(leader, parts, metadata, commit, coordinator_epoch)
                    for leader, parts in by_leader.items()
                )
            )
            for written in answers:
                remaining -= written
            if remaining:
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, MARKER_RETRY_MAX_S)

    async def _markers_at(
        self,
        leader: int,
        partitions: list[tuple[str, int]],
        metadata: TxnMetadata,
        commit: bool,
        coordinator_epoch: int,
    ) -> set[tuple[str, int]]:
        """The partitions whose marker ``leader`` wrote (and replicated)."""
        request = {
            "producer_id": metadata.producer_id,
            "producer_epoch": metadata.producer_epoch,
            "commit": commit,
            "coordinator_epoch": coordinator_epoch,
            "partitions": [[topic, index] for topic, index in partitions],
        }
        if leader < 0:
            return set()
        if leader == self._replicas.broker_id:
            errors = await self.write_markers_here(request)
        else:
            try:
                status, body = await self._peers().request(
                    leader, "POST", MARKERS_PATH, json_body=request, timeout_s=WRITE_TIMEOUT_S + 2
                )
            except PeerUnavailableError as error:
                log.debug("markers to broker %d: %s", leader, error)
                return set()
            if status != 200 or not isinstance(body, dict):
                return set()
            errors = body.get("errors", {})
        written = set()
        for topic, index in partitions:
            code = errors.get(f"{topic}:{index}", ErrorCode.UNKNOWN_SERVER_ERROR)
            if code == ErrorCode.NONE:
                written.add((topic, index))
            elif code == ErrorCode.INVALID_PRODUCER_EPOCH:
                # A newer decision already ended this epoch there: nothing more to write.
                written.add((topic, index))
            elif code == ErrorCode.TRANSACTION_COORDINATOR_FENCED:
                # A newer coordinator of the id wrote there: this broker lost the id, which
                # the next round's ownership check sees once its image has caught up.
                log.info(
                    "transaction %s: marker to %s-%d fenced by a newer coordinator",
                    metadata.transactional_id,
                    topic,
                    index,
                )
        return written

    async def write_markers_here(self, request: dict[str, Any]) -> dict[str, int]:
        """WriteTxnMarkers at this broker: append the marker to each named partition it leads
        and wait for the in-sync replicas. ``"topic:partition" -> error code``."""
        producer_id = int(request["producer_id"])
        producer_epoch = int(request["producer_epoch"])
        commit = bool(request["commit"])
        coordinator_epoch = int(request["coordinator_epoch"])
        errors: dict[str, int] = {}
        waits: list[tuple[str, str, int, asyncio.Future[ErrorCode]]] = []
        for topic, index in request["partitions"]:
            name = f"{topic}:{index}"
            partition = self._replicas.partition(str(topic), int(index))
            if partition is None or not partition.is_leader:
                errors[name] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                continue
            try:
                result = partition.write_txn_marker(
                    producer_id, producer_epoch, commit=commit, coordinator_epoch=coordinator_epoch
                )
            except ProducerRejectedError as error:
                errors[name] = error.error
                continue
            except OSError as error:
                log.error("marker to %s failed: %s", name, error)
                errors[name] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            waiter = partition.add_delayed_produce(result.last_offset + 1)
            waits.append((name, str(topic), int(index), waiter))
        for name, topic, index, waiter in waits:
            try:
                code = await asyncio.wait_for(waiter, WRITE_TIMEOUT_S)
            except TimeoutError:
                code = ErrorCode.REQUEST_TIMED_OUT
            errors[name] = code
            if code == ErrorCode.NONE and self._on_marker is not None:
                self._on_marker(topic, index, producer_id, commit)
        return {name: int(code) for name, code in errors.items()}

    # -- verification (KIP-890 part 1) ---------------------------------------------------------

    def verify_here(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
    ) -> ErrorCode | dict[tuple[str, int], ErrorCode]:
        """Whether each partition is in the producer's running transaction: an error for the
        whole request (``NOT_COORDINATOR``, ``INVALID_PRODUCER_ID_MAPPING``,
        ``PRODUCER_FENCED``, ``CONCURRENT_TRANSACTIONS`` while it ends), or one per partition
        (``NONE``, or ``INVALID_TXN_STATE`` for one not added)."""
        try:
            self._owner(transactional_id)
            metadata = self._checked(transactional_id, producer_id, producer_epoch)
        except _Refused as refused:
            return refused.error
        running = metadata.state is TxnState.ONGOING
        added = set(metadata.partitions)
        return {
            key: ErrorCode.NONE if running and key in added else ErrorCode.INVALID_TXN_STATE
            for key in partitions
        }

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
    ) -> ErrorCode | dict[tuple[str, int], ErrorCode]:
        """``verify_here`` at the id's coordinator, this broker or another
        (``COORDINATOR_NOT_AVAILABLE`` when it cannot be asked)."""
        coordinator = self.coordinator_of(transactional_id)
        if coordinator is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if coordinator == self._replicas.broker_id:
            return self.verify_here(transactional_id, producer_id, producer_epoch, partitions)
        request = {
            "transactional_id": transactional_id,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "partitions": [[topic, index] for topic, index in partitions],
        }
        try:
            status, body = await self._peers().request(
                coordinator, "POST", VERIFY_PATH, json_body=request, timeout_s=VERIFY_TIMEOUT_S
            )
        except PeerUnavailableError as error:
            log.debug("verification at broker %d: %s", coordinator, error)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if status != 200 or not isinstance(body, dict):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if "error" in body:
            return _error_code(body["error"])
        errors = body.get("errors", {})
        return {
            (topic, index): _error_code(
                errors.get(f"{topic}:{index}", ErrorCode.UNKNOWN_SERVER_ERROR)
            )
            for topic, index in partitions
        }

    # -- timeouts -----------------------------------------------------------------------------

    async def _abort_timed_out(self) -> None:
        """Every ``ABORT_CHECK_INTERVAL_S``: abort (with a bumped epoch) each transaction open
        past its timeout, and remove each id expired (``expirable``), looking only at the ids
        whose time came (``_due``)."""
        while not self._stopped and self._loaded:
            await asyncio.sleep(ABORT_CHECK_INTERVAL_S)
            now = _now_ms()
            due: list[str] = []
            while self._due and self._due[0][0] <= now:
                at, transactional_id = heapq.heappop(self._due)
                if self._due_at.get(transactional_id) == at:
                    del self._due_at[transactional_id]
                    due.append(transactional_id)
            for transactional_id in due:
                metadata = self._txns.get(transactional_id)
                if metadata is None:
                    continue
                with contextlib.suppress(_Refused):
                    if metadata.state is TxnState.ONGOING:
                        await self._abort_expired(transactional_id, now)
                    elif self.expirable(metadata, now):
                        await self._remove_expired(transactional_id, now)
                metadata = self._txns.get(transactional_id)
                if (
                    metadata is not None
                    and transactional_id not in self._due_at
                    and (when := self._due_ms(metadata)) is not None
                ):
                    # Not done (refused, or changed meanwhile): look again when it is due.
                    self._schedule(transactional_id, max(when, now + ABORT_RETRY_MS))

    def expirable(self, metadata: TxnMetadata, now_ms: int) -> bool:
        """Whether ``metadata``'s id has had no transaction and no change for the expiration
        time (its due time, ``_due_ms``, has come)."""
        if metadata.state not in _EXPIRABLE:
            return False
        due = self._due_ms(metadata)
        return due is not None and now_ms >= due

    async def _remove_expired(self, transactional_id: str, now: int) -> None:
        partition, _epoch = self._owner(transactional_id)
        async with self._lock(transactional_id):
            metadata = self._txns.get(transactional_id)
            if metadata is None or not self.expirable(metadata, now):
                return  # used again meanwhile
            await self._write(partition, record_key(transactional_id), None)
            self._forget(transactional_id)
            log.info(
                "transactional id %s expired: no transaction for %d ms (producer id %d)",
                transactional_id,
                now - metadata.update_ms,
                metadata.producer_id,
            )

    async def _abort_expired(self, transactional_id: str, now: int) -> None:
        partition, _epoch = self._owner(transactional_id)
        async with self._lock(transactional_id):
            metadata = self._txns.get(transactional_id)
            if metadata is None or metadata.state is not TxnState.ONGOING:
                return
            if now <= metadata.start_ms + metadata.timeout_ms:
                return
            log.info("transaction %s timed out: aborting it", transactional_id)
            bumped = await self._bumped(metadata)
            aborting = bumped.moved(TxnState.PREPARE_ABORT, update_ms=now)
            await self._persist(partition, aborting)
            self._complete_later(aborting)

    # -- reads --------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self._txns.get(transactional_id)

    def transactions(self) -> list[TxnMetadata]:
        return list(self._txns.values())
