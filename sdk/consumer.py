"""``AsyncConsumer`` and its synchronous twin ``Consumer``: consumer groups or manual
assignment, positions, commits, batch reads, and the ``run`` loop of the runtime API.

    async with AsyncConsumer("127.0.0.1:9092", group_id="billing", topics=["orders"]) as c:
        async for record in c:
            print(record.offset, record.value)
            await c.commit()

    consumer = Consumer("127.0.0.1:9092", group_id="billing", topics=["orders"])
    consumer.run(each_message=handle)       # commits after handle(record) returns; Ctrl-C stops

How it works:

* **Groups** (``group_id`` and ``topics``, or ``subscribe``): the consumer joins when it has
  to — JoinGroup (first without a member id; the coordinator answers MEMBER_ID_REQUIRED with
  one), then SyncGroup; the leader assigns partitions with Kafka's range assignor, so Flux,
  Java, librdkafka and kafka-python members can share a group. A heartbeat task reports
  REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID; the next read then revokes
  the assignment (``on_revoke``), joins again and calls ``on_assign``. Coordination uses its
  own connections, so a long-polling fetch never delays a heartbeat or a commit.
* **Manual assignment** (``assign``): no group membership; commits (with a ``group_id``) carry
  no generation, as Kafka's ``assign`` + ``commit`` do.
* **Positions** start at the group's committed offsets, else at the log start with
  ``read_old=True`` (everything retained) or at the log end with ``read_old=False`` (only
  messages produced from now on). ``seek``, ``seek_to_beginning`` and ``seek_to_end`` move
  them. A record's position advances when a read returns it; ``commit`` commits the positions
  (or given offsets); ``commit_async`` does it in the background; ``enable_auto_commit``
  commits every ``auto_commit_interval_ms``, before a rebalance and on ``close``.
* **Fetching** keeps one long-polling Fetch in flight per partition leader for the partitions
  with nothing buffered; routing errors and lost connections refresh metadata and fetch again
  from the new leader.
* **Transactions**: with ``isolation_level="read_committed"`` a read returns only records of
  committed transactions (and non-transactional ones): fetches stop at the last stable offset
  (a transaction still open holds the partition back there), the records of aborted
  transactions are dropped using the answer's aborted-transaction list
  (``flux.sdk.messages.committed_batches``), and "latest" positions mean the last stable
  offset. The default, ``read_uncommitted``, returns everything written. Control batches
  (commit and abort markers) are never returned. ``group_metadata()`` is what a
  transactional producer's ``send_offsets_to_transaction`` takes.
* **Security**: ``security=`` (see ``flux.sdk.security``) applies to the fetch and the
  coordination connections alike; a refused login raises ``FluxAuthenticationError`` from
  the read that needed the connection (never retried).
* **``run``** (runtime API) reads batches, calls ``each_message(record)`` or
  ``each_batch(records)`` (plain or ``async`` functions; plain ones run in a worker thread so
  heartbeats go on), commits after the handler succeeds, retries a failing handler with
  exponential backoff, rejoins after rebalances and coordinator moves, and returns cleanly —
  leaving the group — on ``stop()``, SIGINT or SIGTERM.

Thread-safety: an ``AsyncConsumer`` belongs to one event loop. A ``Consumer`` runs one on its
own event-loop thread; call it from one thread at a time (callbacks run in worker threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal
import threading
import time
from collections import deque
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any

from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode

from . import limits
from ._group_requests import (
    offset_commit_body,
    offset_fetch_body,
    read_offset_commit,
    read_offset_fetch,
)
from ._sync import LoopThread, SyncProxy
from .admin import list_offsets
from .cluster_client import COORDINATOR_RETRY_CODES, LEADER_RETRY_CODES, ClusterClient
from .consumer_protocol import (
    RANGE_ASSIGNOR,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from .errors import (
    ConfigurationError,
    CoordinatorError,
    FluxConnectionError,
    FluxError,
    FluxProtocolError,
    FluxTimeoutError,
    GroupMembershipError,
    KafkaError,
    UnknownTopicError,
    error_for,
)
from .messages import (
    AbortedTransaction,
    ConsumedRecord,
    ConsumerGroupMetadata,
    TopicPartition,
    decode_fetched,
    fetched_end,
)
from .metadata import RetryBudget, RetryPolicy
from .security import ClientSecurity

__all__ = ["AsyncConsumer", "Consumer", "TopicPartition"]

log = logging.getLogger("flux.sdk.consumer")

PartitionsCallback = Callable[[list[TopicPartition]], Any]

#: Heartbeat or commit answers that mean "this member must join again".
REJOIN_CODES = frozenset(
    {
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.FENCED_INSTANCE_ID,
    }
)
#: ... of which these mean the member id itself is gone.
_MEMBER_LOST_CODES = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID})
_PROTOCOL_TYPE = "consumer"
_EARLIEST_TIMESTAMP = -2
_LATEST_TIMESTAMP = -1
#: ``isolation_level`` -> the Fetch / ListOffsets field.
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
SESSION_TIMEOUT_MS_RANGE = (1_000, 3_600_000)
HEARTBEAT_INTERVAL_MS_DEFAULT_MAX = 3_000
#: A fetch that failed (routing error, lost connection) waits this long before the next.
_FETCH_RETRY_BACKOFF_S = 0.1
#: ``run`` backs off this long (doubling up to the max) while the group or cluster is
#: unavailable, and as long again between attempts of a failing handler.
_RUN_BACKOFF_INITIAL_S = 0.1
_RUN_BACKOFF_MAX_S = 5.0
#: Transient conditions ``run`` rides out (rejoining, coordinator moves, lost brokers).
#: The key of the metadata refresh that ``_fetches`` holds after a routing error.
_REFRESH_TASK = -1
_TRANSIENT_ERRORS = (
    FluxConnectionError,
    FluxTimeoutError,
    FluxProtocolError,
    CoordinatorError,
    GroupMembershipError,
)


class _Buffer(deque[ConsumedRecord]):
    """Fetched records of one partition not handed out yet, and the offset after the batches
    they came in (the position once they are all handed out)."""

    def __init__(self, records: list[ConsumedRecord], end: int) -> None:
        super().__init__(records)
        self.end = end


class AsyncConsumer:
    """See the module docstring."""

    def __init__(
        self,
        bootstrap: str,
        *,
        group_id: str | None = None,
        topics: Sequence[str] | None = None,
        client_id: str = "flux-consumer",
        read_old: bool = False,
        enable_auto_commit: bool = False,
        auto_commit_interval_ms: int = 5_000,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        heartbeat_interval_ms: int | None = None,
        fetch_max_bytes: int = 1 << 20,
        fetch_max_wait_ms: int = 500,
        max_poll_records: int = 500,
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
        timeout_s: float = limits.RETRY_TIMEOUT_S,
        security: ClientSecurity | Mapping[str, Any] | None = None,
        isolation_level: str = "read_uncommitted",
    ) -> None:
        if isolation_level not in ISOLATION_LEVELS:
            raise ConfigurationError(
                f"isolation_level must be one of {sorted(ISOLATION_LEVELS)}, "
                f"got {isolation_level!r}"
            )
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise ConfigurationError("group_id must be a non-empty string (or None)")
        if topics is not None:
            _check_topics(topics)
            if group_id is None:
                raise ConfigurationError("topics (a subscription) needs a group_id; use assign()")
        low, high = SESSION_TIMEOUT_MS_RANGE
        if not low <= session_timeout_ms <= high:
            raise ConfigurationError(f"session_timeout_ms must be in {low}..{high}")
        if not session_timeout_ms <= rebalance_timeout_ms <= high:
            raise ConfigurationError(f"rebalance_timeout_ms must be in session_timeout_ms..{high}")
        if heartbeat_interval_ms is None:
            heartbeat_interval_ms = min(HEARTBEAT_INTERVAL_MS_DEFAULT_MAX, session_timeout_ms // 3)
        if not 1 <= heartbeat_interval_ms < session_timeout_ms:
            raise ConfigurationError("heartbeat_interval_ms must be below session_timeout_ms")
        if not 1 <= fetch_max_bytes <= limits.FETCH_BYTES_MAX:
            raise ConfigurationError(f"fetch_max_bytes must be in 1..{limits.FETCH_BYTES_MAX}")
        if not 0 <= fetch_max_wait_ms <= limits.FETCH_WAIT_MS_MAX:
            raise ConfigurationError(f"fetch_max_wait_ms must be in 0..{limits.FETCH_WAIT_MS_MAX}")
        if not 1 <= max_poll_records <= limits.POLL_RECORDS_MAX:
            raise ConfigurationError(f"max_poll_records must be in 1..{limits.POLL_RECORDS_MAX}")
        if auto_commit_interval_ms <= 0:
            raise ConfigurationError("auto_commit_interval_ms must be positive")
        if enable_auto_commit and group_id is None:
            raise ConfigurationError("enable_auto_commit needs a group_id")
        self.group_id = group_id
        self.read_old = read_old
        self.isolation_level = isolation_level
        self._isolation = ISOLATION_LEVELS[isolation_level]
        self._session_timeout_ms = session_timeout_ms
        self._rebalance_timeout_ms = rebalance_timeout_ms
        self._heartbeat_interval_s = heartbeat_interval_ms / 1000
        self._auto_commit_interval_s = (
            auto_commit_interval_ms / 1000 if enable_auto_commit else None
        )
        self._fetch_max_bytes = fetch_max_bytes
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self.max_poll_records = max_poll_records
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        retry = RetryPolicy(timeout_s=timeout_s)
        # A fetch long-polls, so its socket waits longer than the retry policy alone says.
        self.client = ClusterClient(
            bootstrap,
            client_id=client_id,
            request_timeout_s=limits.REQUEST_TIMEOUT_S + fetch_max_wait_ms / 1000,
            retry=retry,
            security=security,
        )
        # Coordination has its own connections: a JoinGroup is answered only when the
        # rebalance completes, and nothing else should queue behind it or behind a fetch.
        self._group_client = ClusterClient(
            bootstrap,
            client_id=client_id,
            request_timeout_s=max(limits.REQUEST_TIMEOUT_S, rebalance_timeout_ms / 1000 + 5),
            retry=retry,
            security=self.client.security,
        )
        self._subscription: list[str] | None = None
        self._manual: list[TopicPartition] | None = None
        self._member_id = ""
        self._generation_id = -1
        self._needs_join = False
        self._rejoin_reason: ErrorCode | None = None
        self._positions: dict[TopicPartition, int] = {}
        self._resets: dict[TopicPartition, int] = {}  # partition -> timestamp to reset to
        self._buffers: dict[TopicPartition, _Buffer] = {}
        # Leader id -> its fetch in flight, and the partitions that fetch asks for.
        self._fetches: dict[int, asyncio.Task[None]] = {}
        self._fetching: dict[int, frozenset[TopicPartition]] = {}
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._last_auto_commit = time.monotonic()
        self._stop_event = asyncio.Event()
        self._closed = False
        if topics is not None:
            self.subscribe(topics)

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[ConsumedRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumedRecord]:
        while not self._closed:
            for record in await self.poll(timeout_s=1.0):
                yield record

    # -- subscription and assignment -------------------------------------------------------

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> None:
        """Join ``group_id`` for ``topics`` at the next read; the callbacks (plain or async)
        get the partitions assigned / taken away."""
        _check_topics(topics)
        if self.group_id is None:
            raise ConfigurationError("subscribe needs a group_id; use assign() without a group")
        if self._manual is not None:
            raise ConfigurationError("the consumer is manually assigned; it cannot subscribe")
        self._subscription = list(dict.fromkeys(topics))
        self.client.metadata.track(self._subscription)
        if on_assign is not None:
            self._on_assign = on_assign
        if on_revoke is not None:
            self._on_revoke = on_revoke
        self._needs_join = True

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Read exactly these partitions, without group membership. Positions start at the
        committed offsets (with a ``group_id``), else per ``read_old``."""
        if self._subscription is not None:
            raise ConfigurationError("the consumer is subscribed; it cannot also assign")
        assigned = [TopicPartition(topic, partition) for topic, partition in partitions]
        self._manual = assigned
        self._drop_fetches()
        self._positions = {tp: p for tp, p in self._positions.items() if tp in assigned}
        self._buffers = {tp: b for tp, b in self._buffers.items() if tp in assigned}
        self._resets = {tp: r for tp, r in self._resets.items() if tp in assigned}
        self.client.metadata.track({tp.topic for tp in assigned})

    async def assign_topic(self, topic: str) -> list[TopicPartition]:
        """Manually assign every partition of ``topic``; returns them."""
        count = await self.client.partition_count(topic)
        partitions = [TopicPartition(topic, p) for p in range(count)]
        self.assign([*(self._manual or []), *partitions])
        return partitions

    def assignment(self) -> list[TopicPartition]:
        """The partitions this consumer reads now (sorted)."""
        if self._manual is not None:
            return sorted(self._manual)
        return sorted(self._positions.keys() | self._resets.keys())

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def generation_id(self) -> int:
        return self._generation_id

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group, generation and member id, for a transactional producer's
        ``send_offsets_to_transaction`` (Kafka's ``consumer.groupMetadata()``)."""
        group_id = self._require_group("group_metadata")
        return ConsumerGroupMetadata(group_id, self._generation_id, self._member_id)

    # -- positions -------------------------------------------------------------------------

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        """Read ``partition`` from ``offset`` on (the next read)."""
        tp = self._assigned(partition)
        if offset < 0:
            raise ConfigurationError(f"offset {offset} is negative")
        self._set_position(tp, offset)

    def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        """Read these (default: every assigned) partitions from the log start."""
        for tp in self._targets(partitions):
            self._reset(tp, _EARLIEST_TIMESTAMP)

    def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        """Read only records appended after the next read, on these (default: all) partitions."""
        for tp in self._targets(partitions):
            self._reset(tp, _LATEST_TIMESTAMP)

    async def position(self, partition: tuple[str, int]) -> int:
        """The offset of the next record a read returns for ``partition``."""
        tp = self._assigned(partition)
        await self._resolve_positions()
        return self._positions[tp]

    async def committed(self, partition: tuple[str, int]) -> int | None:
        """The group's committed offset of ``partition`` (None if nothing was committed)."""
        group_id = self._require_group("committed")
        tp = TopicPartition(*partition)
        offsets = await self._group_client.call_coordinator(
            group_id,
            ApiKey.OFFSET_FETCH,
            offset_fetch_body(group_id, {tp.topic: [tp.partition]}),
            read_offset_fetch,
        )
        return offsets.get(tp)

    async def beginning_offsets(self, topic: str) -> dict[int, int]:
        """Partition -> log start offset of every partition of ``topic``."""
        return await list_offsets(self.client, topic, _EARLIEST_TIMESTAMP)

    async def end_offsets(self, topic: str) -> dict[int, int]:
        """Partition -> high watermark (the offset the next record gets) of ``topic``; the
        last stable offset with ``read_committed``."""
        return await list_offsets(
            self.client, topic, _LATEST_TIMESTAMP, isolation_level=self._isolation
        )

    def _assigned(self, partition: tuple[str, int]) -> TopicPartition:
        tp = TopicPartition(*partition)
        if tp not in self.assignment():
            raise ConfigurationError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return tp

    def _targets(self, partitions: tuple[tuple[str, int], ...]) -> list[TopicPartition]:
        return [self._assigned(p) for p in partitions] if partitions else self.assignment()

    def _set_position(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset
        self._resets.pop(tp, None)
        self._buffers.pop(tp, None)

    def _reset(self, tp: TopicPartition, timestamp: int) -> None:
        self._positions.pop(tp, None)
        self._buffers.pop(tp, None)
        self._resets[tp] = timestamp

    # -- reading ---------------------------------------------------------------------------

    async def getmany(
        self, timeout_s: float = 1.0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumedRecord]]:
        """Records per partition, at most ``max_records`` (default ``max_poll_records``) in
        all, waiting up to ``timeout_s`` for some (joining a group may take longer: up to the
        rebalance timeout). Empty when nothing came, or when ``stop()`` was called."""
        self._check_open()
        if max_records is None:
            max_records = self.max_poll_records
        if not 1 <= max_records <= limits.POLL_RECORDS_MAX:
            raise ConfigurationError(f"max_records must be in 1..{limits.POLL_RECORDS_MAX}")
        if timeout_s < 0:
            raise ConfigurationError("timeout_s must not be negative")
        deadline = time.monotonic() + timeout_s
        while True:
            await self._ensure_ready()
            await self._maybe_auto_commit()
            taken = self._take(max_records)
            remaining_s = deadline - time.monotonic()
            if taken or remaining_s <= 0 or self._stop_event.is_set():
                return taken
            await self._wait_for_fetches(remaining_s)

    async def poll(
        self, timeout_s: float = 1.0, max_records: int | None = None
    ) -> list[ConsumedRecord]:
        """``getmany`` as one list (partition by partition, each in offset order)."""
        batches = await self.getmany(timeout_s, max_records)
        return [record for records in batches.values() for record in records]

    def _take(self, max_records: int) -> dict[TopicPartition, list[ConsumedRecord]]:
        taken: dict[TopicPartition, list[ConsumedRecord]] = {}
        count = 0
        for tp, buffer in list(self._buffers.items()):
            if count >= max_records:
                break
            if tp not in self._positions:
                self._buffers.pop(tp)
                continue
            if len(buffer) <= max_records - count:
                records = list(buffer)  # the whole buffer: one copy, not a pop per record
                buffer.clear()
            else:
                records = [buffer.popleft() for _ in range(max_records - count)]
            count += len(records)
            if records:
                taken[tp] = records
                self._positions[tp] = records[-1].offset + 1
            if not buffer:
                self._buffers.pop(tp)
                if isinstance(buffer, _Buffer) and buffer.end > self._positions[tp]:
                    self._positions[tp] = buffer.end
        return taken

    async def _wait_for_fetches(self, timeout_s: float) -> None:
        self._start_fetches()
        waiters: set[asyncio.Future[Any]] = set(self._fetches.values())
        stop = asyncio.ensure_future(self._stop_event.wait())
        try:
            await asyncio.wait(
                waiters | {stop},
                timeout=timeout_s if waiters else min(timeout_s, _FETCH_RETRY_BACKOFF_S),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            stop.cancel()
        for leader, task in list(self._fetches.items()):
            if task.done():
                del self._fetches[leader]
                self._fetching.pop(leader, None)
                if not task.cancelled():
                    task.result()  # raises a fetch error that must reach the caller

    def _start_fetches(self) -> None:
        busy = {tp for partitions in self._fetching.values() for tp in partitions}
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        stale = False
        for tp, position in self._positions.items():
            if tp in busy or self._buffers.get(tp):
                continue
            try:
                leader = self.client.metadata.leader_for(tp.topic, tp.partition).node_id
            except KafkaError:
                stale = True
                continue
            by_leader.setdefault(leader, {})[tp] = position
        for leader, partitions in by_leader.items():
            if leader not in self._fetches:
                self._fetches[leader] = asyncio.ensure_future(self._fetch(leader, partitions))
                self._fetching[leader] = frozenset(partitions)
        if stale and _REFRESH_TASK not in self._fetches:
            self._fetches[_REFRESH_TASK] = asyncio.ensure_future(self._refresh_after_error())
            self._fetching[_REFRESH_TASK] = frozenset()

    async def _refresh_after_error(self) -> None:
        await asyncio.sleep(_FETCH_RETRY_BACKOFF_S)
        with contextlib.suppress(FluxConnectionError, FluxTimeoutError):
            await self.client.refresh()

    async def _fetch(self, leader: int, partitions: dict[TopicPartition, int]) -> None:
        """One Fetch to ``leader``; buffers what it returns for partitions whose position is
        still the one asked for. Routing errors and lost connections refresh metadata."""
        body = self._fetch_body(partitions)
        try:
            response = await self.client.send_once(
                leader, ApiKey.FETCH, body, lambda answer, _: answer
            )
        except (FluxConnectionError, FluxTimeoutError, FluxProtocolError) as error:
            log.debug("fetch from broker %d failed: %s", leader, error)
            await self._refresh_after_error()
            return
        if await self._read_fetch(response, partitions):
            await self._refresh_after_error()

    def _fetch_body(self, partitions: dict[TopicPartition, int]) -> dict[str, Any]:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, position in partitions.items():
            by_topic.setdefault(tp.topic, []).append(
                {
                    "partition": tp.partition,
                    "current_leader_epoch": -1,
                    "fetch_offset": position,
                    "log_start_offset": -1,
                    "partition_max_bytes": self._fetch_max_bytes,
                }
            )
        return {
            "replica_id": -1,
            "max_wait_ms": self._fetch_max_wait_ms,
            "min_bytes": 1,
            "max_bytes": self._fetch_max_bytes,
            "isolation_level": self._isolation,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }

    async def _read_fetch(self, response: dict[str, Any], asked: dict[TopicPartition, int]) -> bool:
        """Buffer the fetched records; True if metadata looks stale (a routing error)."""
        code = ErrorCode.from_code(response.get("error_code", 0))
        if code is not ErrorCode.NONE:
            raise error_for(code, f"fetch: {code.message}")
        stale = False
        for topic_result in response["responses"]:
            topic = topic_result["topic"]
            for result in topic_result["partitions"]:
                tp = TopicPartition(topic, result["partition_index"])
                position = asked.get(tp)
                if position is None or self._positions.get(tp) != position:
                    continue  # moved (seek, rebalance) while the fetch was out
                code = ErrorCode.from_code(result["error_code"])
                if code is ErrorCode.NONE:
                    records = decode_fetched(
                        result["records"], tp.topic, tp.partition, position, self._aborted(result)
                    )
                    end = fetched_end(result["records"])
                    if records:
                        self._buffers[tp] = _Buffer(records, end)
                    elif end > position:
                        self._positions[tp] = end  # batches with nothing to hand out
                elif code is ErrorCode.OFFSET_OUT_OF_RANGE:
                    log.info("%s-%d: offset %d out of range, resetting", *tp, position)
                    self._reset(tp, _EARLIEST_TIMESTAMP if self.read_old else _LATEST_TIMESTAMP)
                elif code in LEADER_RETRY_CODES:
                    stale = True
                else:
                    raise error_for(
                        code, f"{topic}-{tp.partition} at offset {position}: {code.message}"
                    )
        return stale

    def _aborted(self, result: dict[str, Any]) -> list[AbortedTransaction] | None:
        """read_committed: the answer's aborted transactions (None: read everything)."""
        if not self._isolation:
            return None
        return [
            AbortedTransaction(entry["producer_id"], entry["first_offset"])
            for entry in result.get("aborted_transactions") or ()
        ]

    def _drop_fetches(self) -> None:
        for task in self._fetches.values():
            task.cancel()
        self._fetches.clear()
        self._fetching.clear()

    # -- membership ------------------------------------------------------------------------

    async def _ensure_ready(self) -> None:
        if self._subscription is not None:
            if self._rejoin_reason is not None:
                code, self._rejoin_reason = self._rejoin_reason, None
                log.info("group %r: %s, rejoining", self.group_id, code.name)
                self._note_membership_problem(code)
            if self._needs_join:
                await self._rejoin()
        await self._resolve_positions()

    def _note_membership_problem(self, code: ErrorCode) -> None:
        if code in REJOIN_CODES:
            self._needs_join = True
        if code in _MEMBER_LOST_CODES:
            self._member_id = ""

    async def _rejoin(self) -> None:
        await self._revoke()
        generation_id, assigned = await self._join_and_sync()
        self._generation_id = generation_id
        partitions = [TopicPartition(t, p) for t, ps in assigned.items() for p in ps]
        for tp in partitions:
            self._resets[tp] = _EARLIEST_TIMESTAMP if self.read_old else _LATEST_TIMESTAMP
        await self._use_committed(partitions)
        self._needs_join = False
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.ensure_future(self._heartbeat_forever())
        if self._on_assign is not None:
            await _invoke(self._on_assign, sorted(partitions))

    async def _revoke(self) -> None:
        """Give up the current assignment: auto-commit, ``on_revoke``, forget positions."""
        self._drop_fetches()
        if self._generation_id < 0:
            return
        revoked = self.assignment()
        try:
            if self._auto_commit_interval_s is not None and self._member_id:
                with contextlib.suppress(GroupMembershipError):
                    await self.commit()
            if self._on_revoke is not None:
                await _invoke(self._on_revoke, revoked)
        finally:
            self._generation_id = -1
            self._positions = {}
            self._resets = {}
            self._buffers = {}
            self._needs_join = True

    async def _join_and_sync(self) -> tuple[int, dict[str, list[int]]]:
        """Join until a generation's SyncGroup succeeds; return (generation, assignment).

        Rebalances that restart the round are retried within the retry policy's time plus
        the rebalance timeout."""
        group_id = self._require_group("joining")
        budget = RetryBudget(
            RetryPolicy(
                max_attempts=limits.RETRY_ATTEMPTS_MAX,
                timeout_s=self.client.retry.timeout_s + self._rebalance_timeout_ms / 1000,
            )
        )
        while True:
            joined = await self._group_client.call_coordinator(
                group_id, ApiKey.JOIN_GROUP, self._join_body(), _read_group_answer
            )
            code = ErrorCode.from_code(joined["error_code"])
            if code is ErrorCode.MEMBER_ID_REQUIRED:
                self._member_id = joined["member_id"]
                continue  # not a failure: the protocol's second step
            if code is ErrorCode.NONE:
                self._member_id = joined["member_id"]
                synced = await self._sync(joined)
                code = ErrorCode.from_code(synced["error_code"])
                if code is ErrorCode.NONE:
                    assignment = decode_assignment(synced["assignment"])
                    return joined["generation_id"], _own_topics(
                        assignment, self._subscription or []
                    )
            if code not in REJOIN_CODES:
                raise error_for(code, f"joining group {group_id!r}: {code.message}")
            if code in _MEMBER_LOST_CODES:
                self._member_id = ""
            delay_s = budget.next_delay_s()
            if delay_s is None:
                raise FluxTimeoutError(
                    f"could not join group {group_id!r} in {budget.elapsed_s:.1f} s "
                    f"(last answer: {code.name})"
                )
            await asyncio.sleep(delay_s)

    def _join_body(self) -> dict[str, Any]:
        subscription = encode_subscription(Subscription(topics=self._subscription or [], version=0))
        return {
            "group_id": self.group_id,
            "session_timeout_ms": self._session_timeout_ms,
            "rebalance_timeout_ms": self._rebalance_timeout_ms,
            "member_id": self._member_id,
            "group_instance_id": None,
            "protocol_type": _PROTOCOL_TYPE,
            "protocols": [{"name": RANGE_ASSIGNOR, "metadata": subscription}],
            "reason": None,
        }

    async def _sync(self, joined: dict[str, Any]) -> dict[str, Any]:
        assignments = []
        if joined["leader"] == joined["member_id"]:
            assignments = [
                {"member_id": member_id, "assignment": encode_assignment(Assignment(assigned))}
                for member_id, assigned in (await self._assign(joined["members"])).items()
            ]
        body = {
            "group_id": self.group_id,
            "generation_id": joined["generation_id"],
            "member_id": joined["member_id"],
            "group_instance_id": None,
            "protocol_type": _PROTOCOL_TYPE,
            "protocol_name": RANGE_ASSIGNOR,
            "assignments": assignments,
        }
        return await self._group_client.call_coordinator(
            self.group_id or "", ApiKey.SYNC_GROUP, body, _read_group_answer
        )

    async def _assign(self, members: list[dict[str, Any]]) -> dict[str, dict[str, list[int]]]:
        """The leader's job: range-assign every member's subscribed topics."""
        subscriptions = {
            member["member_id"]: decode_subscription(member["metadata"]) for member in members
        }
        counts: dict[str, int] = {}
        for topic in sorted({t for s in subscriptions.values() for t in s.topics}):
            try:
                counts[topic] = await self.client.partition_count(topic)
            except UnknownTopicError:
                log.warning("group %r: subscribed topic %r does not exist", self.group_id, topic)
        return range_assign(subscriptions, counts)

    async def _heartbeat_forever(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._heartbeat_interval_s)
            if self._generation_id < 0 or self._needs_join:
                continue
            membership = (self._member_id, self._generation_id)
            try:
                code = await self._heartbeat(membership)
            except FluxError as error:  # transient or not, the next beat tries again
                log.debug("heartbeat of group %r failed: %s", self.group_id, error)
                continue
            if code in REJOIN_CODES and membership == (self._member_id, self._generation_id):
                self._rejoin_reason = code
                self._drop_fetches()
            elif code is not ErrorCode.NONE and code not in REJOIN_CODES:
                log.warning("heartbeat of group %r: %s", self.group_id, code.name)

    async def _heartbeat(self, membership: tuple[str, int]) -> ErrorCode:
        group_id = self._require_group("heartbeat")
        body = {
            "group_id": group_id,
            "generation_id": membership[1],
            "member_id": membership[0],
            "group_instance_id": None,
        }
        node_id = await self._group_client.coordinator_for(group_id)
        try:
            return await self._group_client.send_once(
                node_id,
                ApiKey.HEARTBEAT,
                body,
                _read_heartbeat,
                timeout_s=max(1.0, self._session_timeout_ms / 2000),
            )
        except (CoordinatorError, FluxConnectionError, FluxTimeoutError):
            self._group_client.forget_coordinator(group_id)
            raise

    async def _leave(self) -> None:
        if not self._member_id or self.group_id is None:
            return
        member = {"member_id": self._member_id, "group_instance_id": None, "reason": None}
        body = {"group_id": self.group_id, "member_id": self._member_id, "members": [member]}
        try:
            async with asyncio.timeout(self._session_timeout_ms / 1000):
                await self._group_client.call_coordinator(
                    self.group_id, ApiKey.LEAVE_GROUP, body, lambda response, _: None
                )
        except (FluxError, TimeoutError) as error:  # the session timeout removes it anyway
            log.info("leaving group %r failed: %s", self.group_id, error)
        self._member_id = ""
        self._generation_id = -1

    # -- starting positions ----------------------------------------------------------------

    async def _resolve_positions(self) -> None:
        """Give every assigned partition a position: committed offset (manual assignment with
        a group), else the pending reset (``read_old``, ``seek_to_*``)."""
        if self._manual is not None:
            missing = [tp for tp in self._manual if tp not in self._positions]
            fresh = [tp for tp in missing if tp not in self._resets]
            for tp in fresh:
                self._resets[tp] = _EARLIEST_TIMESTAMP if self.read_old else _LATEST_TIMESTAMP
            if fresh and self.group_id is not None:
                await self._use_committed(fresh)
        if not self._resets:
            return
        by_topic: dict[tuple[str, int], list[TopicPartition]] = {}
        for tp, timestamp in self._resets.items():
            by_topic.setdefault((tp.topic, timestamp), []).append(tp)
        for (topic, timestamp), partitions in by_topic.items():
            offsets = await list_offsets(
                self.client, topic, timestamp, isolation_level=self._isolation
            )
            for tp in partitions:
                if self._resets.get(tp) == timestamp:
                    self._set_position(tp, offsets[tp.partition])

    async def _use_committed(self, partitions: list[TopicPartition]) -> None:
        if not partitions or self.group_id is None:
            return
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        committed = await self._group_client.call_coordinator(
            self.group_id,
            ApiKey.OFFSET_FETCH,
            offset_fetch_body(self.group_id, by_topic),
            read_offset_fetch,
        )
        for tp in partitions:
            offset = committed.get(tp)
            if offset is not None:
                self._set_position(tp, offset)

    # -- commits ---------------------------------------------------------------------------

    async def commit(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        """Commit ``offsets`` ((topic, partition) -> the offset of the next record to read),
        or the positions of every assigned partition.

        ``GroupMembershipError`` if the group has moved on (the next read rejoins)."""
        self._check_open()
        group_id = self._require_group("commit")
        if offsets is None:
            offsets = dict(self._positions)
        if not offsets:
            return
        subscribed = self._subscription is not None
        if subscribed and self._generation_id < 0:
            raise GroupMembershipError(
                ErrorCode.REBALANCE_IN_PROGRESS,
                f"group {group_id!r}: no current generation (rejoining), nothing committed",
            )
        body = offset_commit_body(
            group_id,
            generation_id=self._generation_id if subscribed else -1,
            member_id=self._member_id if subscribed else "",
            offsets=offsets,
        )
        try:
            await self._group_client.call_coordinator(
                group_id, ApiKey.OFFSET_COMMIT, body, read_offset_commit
            )
        except GroupMembershipError as error:
            self._note_membership_problem(error.code)
            raise

    def commit_async(
        self,
        offsets: dict[tuple[str, int], int] | None = None,
        callback: Callable[[Exception | None], Any] | None = None,
    ) -> asyncio.Task[None]:
        """Start a commit in the background; ``callback(error)`` runs when it is done."""
        snapshot = dict(self._positions) if offsets is None else dict(offsets)
        task = asyncio.ensure_future(self.commit(snapshot))

        def done(finished: asyncio.Task[None]) -> None:
            error = None if finished.cancelled() else finished.exception()
            if error is not None and callback is None:
                log.warning("asynchronous commit failed: %s", error)
            if callback is not None:
                callback(error if isinstance(error, Exception) or error is None else None)

        task.add_done_callback(done)
        return task

    async def _maybe_auto_commit(self) -> None:
        interval_s = self._auto_commit_interval_s
        if interval_s is None or time.monotonic() - self._last_auto_commit < interval_s:
            return
        self._last_auto_commit = time.monotonic()
        with contextlib.suppress(GroupMembershipError):
            await self.commit()

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Make ``run`` return (after the handler it is in) and reads return at once."""
        self._stop_event.set()

    async def close(self) -> None:
        """Commit (with auto-commit), stop heartbeating, leave the group, close connections."""
        if self._closed:
            return
        try:
            if self._auto_commit_interval_s is not None and self._positions:
                with contextlib.suppress(FluxError):
                    await self.commit()
        finally:
            self._closed = True
            self._stop_event.set()
            self._drop_fetches()
            if self._heartbeat_task is not None:
                self._heartbeat_task.cancel()
                with contextlib.suppress(BaseException):
                    await self._heartbeat_task
            await self._leave()
            await self.client.close()
            await self._group_client.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError("the consumer is closed")

    def _require_group(self, what: str) -> str:
        if self.group_id is None:
            raise ConfigurationError(f"{what} needs a group_id")
        return self.group_id

    # -- the runtime API -------------------------------------------------------------------

    async def run(
        self,
        each_message: Callable[[ConsumedRecord], Any] | None = None,
        each_batch: Callable[[list[ConsumedRecord]], Any] | None = None,
        *,
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
        handler_attempts: int = 10,
        handle_signals: bool = True,
    ) -> None:
        """Process records until ``stop()``, SIGINT or SIGTERM, then leave the group and close.

        Exactly one of ``each_message(record)`` / ``each_batch(records)`` (records of one
        partition, in order). After the handler returns for a partition's records, their
        offsets are committed (at-least-once: a record is committed only after it was
        handled). A handler that raises is called again with the same records after an
        exponential backoff, at most ``handler_attempts`` times; then its error is raised
        (nothing after the last handled record is committed). Rebalances, coordinator moves
        and lost brokers are ridden out: ``run`` rejoins and goes on.
        """
        if (each_message is None) == (each_batch is None):
            raise ConfigurationError("run needs exactly one of each_message and each_batch")
        if not 1 <= handler_attempts <= limits.HANDLER_ATTEMPTS_MAX:
            raise ConfigurationError(
                f"handler_attempts must be in 1..{limits.HANDLER_ATTEMPTS_MAX}"
            )
        if self.group_id is None:
            raise ConfigurationError("run needs a group_id (it commits what it processed)")
        if on_assign is not None:
            self._on_assign = on_assign
        if on_revoke is not None:
            self._on_revoke = on_revoke
        self._stop_event.clear()
        removers = self._install_signal_handlers() if handle_signals else []
        try:
            await self._run_loop(each_message, each_batch, handler_attempts)
        finally:
            for remove in removers:
                remove()
            await self.close()

    async def _run_loop(
        self,
        each_message: Callable[[ConsumedRecord], Any] | None,
        each_batch: Callable[[list[ConsumedRecord]], Any] | None,
        handler_attempts: int,
    ) -> None:
        backoff_s = _RUN_BACKOFF_INITIAL_S
        while not self._stop_event.is_set():
            try:
                batches = await self.getmany(timeout_s=1.0)
            except _TRANSIENT_ERRORS as error:
                log.info("group %r: %s; retrying in %.1f s", self.group_id, error, backoff_s)
                await self._sleep_unless_stopped(backoff_s)
                backoff_s = min(_RUN_BACKOFF_MAX_S, backoff_s * 2)
                continue
            backoff_s = _RUN_BACKOFF_INITIAL_S
            for tp, records in batches.items():
                handled = await self._handle(
                    tp, records, each_message, each_batch, handler_attempts
                )
                if handled is None:
                    continue
                try:
                    await self.commit({tp: handled})
                except _TRANSIENT_ERRORS as error:
                    # The partition may be someone else's now; they start at the last commit.
                    log.info("commit of %s-%d failed (%s); rejoining", *tp, error)
                    break
                if self._stop_event.is_set():
                    break

    async def _handle(
        self,
        tp: TopicPartition,
        records: list[ConsumedRecord],
        each_message: Callable[[ConsumedRecord], Any] | None,
        each_batch: Callable[[list[ConsumedRecord]], Any] | None,
        handler_attempts: int,
    ) -> int | None:
        """Run the handler over ``records``; the offset to commit, or None if nothing."""
        if each_batch is not None:
            await self._call_with_retries(each_batch, records, handler_attempts)
            return records[-1].offset + 1
        assert each_message is not None
        handled = None
        for record in records:
            if self._rejoin_reason is not None and handled is not None:
                break  # a rebalance is under way: commit what was done, hand the rest over
            await self._call_with_retries(each_message, record, handler_attempts)
            handled = record.offset + 1
        if handled is not None and handled != records[-1].offset + 1:
            self._set_position(tp, handled)  # unhandled records are read again
        return handled

    async def _call_with_retries(
        self, handler: Callable[[Any], Any], argument: Any, attempts: int
    ) -> None:
        backoff_s = _RUN_BACKOFF_INITIAL_S
        for attempt in range(1, attempts + 1):
            try:
                await _invoke(handler, argument)
                return
            except Exception as error:
                if attempt == attempts:
                    raise
                log.warning(
                    "handler failed (attempt %d of %d): %r; retrying in %.1f s",
                    attempt,
                    attempts,
                    error,
                    backoff_s,
                )
                await asyncio.sleep(backoff_s)
                backoff_s = min(_RUN_BACKOFF_MAX_S, backoff_s * 2)

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stop_event.wait()

    def _install_signal_handlers(self) -> list[Callable[[], None]]:
        if threading.current_thread() is not threading.main_thread():
            return []  # only the main thread may set signal handlers (the sync twin does)
        loop = asyncio.get_running_loop()
        removers: list[Callable[[], None]] = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(signum, self.stop)
            except (NotImplementedError, RuntimeError):
                continue
            removers.append(lambda signum=signum: loop.remove_signal_handler(signum))
        return removers


async def _invoke(function: Callable[[Any], Any], argument: Any) -> Any:
    """Await an async function; run a plain one in a worker thread (the loop keeps going)."""
    if inspect.iscoroutinefunction(function):
        return await function(argument)
    result = await asyncio.to_thread(function, argument)
    if inspect.isawaitable(result):
        return await result
    return result


def _check_topics(topics: Sequence[str]) -> None:
    if isinstance(topics, str) or not topics or not all(isinstance(t, str) and t for t in topics):
        raise ConfigurationError("topics must be a non-empty list of topic names")


def _read_heartbeat(response: dict[str, Any], version: int) -> ErrorCode:
    code = ErrorCode.from_code(response["error_code"])
    if code in COORDINATOR_RETRY_CODES:
        raise error_for(code)
    return code


def _read_group_answer(response: dict[str, Any], version: int) -> dict[str, Any]:
    """A JoinGroup or SyncGroup answer; only coordinator errors raise (to be retried)."""
    code = ErrorCode.from_code(response["error_code"])
    if code in COORDINATOR_RETRY_CODES:
        raise error_for(code)
    return response


def _own_topics(assignment: Assignment, topics: list[str]) -> dict[str, list[int]]:
    """The assigned partitions of the topics this member subscribed to (a leader of another
    client could hand out more; Kafka's consumers ignore those too)."""
    wanted = set(topics)
    return {t: sorted(set(ps)) for t, ps in sorted(assignment.assigned.items()) if t in wanted}


# -- the synchronous twin ---------------------------------------------------------------------


class Consumer:
    """The blocking twin of ``AsyncConsumer`` (same arguments, same methods), running it on
    its own event-loop thread. Iterating yields records; ``run`` handles SIGINT/SIGTERM when
    called from the main thread."""

    def __init__(self, bootstrap: str, **options: Any) -> None:
        self._async = AsyncConsumer(bootstrap, **options)
        self._loop = LoopThread("flux-consumer")

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[ConsumedRecord]:
        while not self._async._closed:
            yield from self.poll(timeout_s=1.0)

    @property
    def group_id(self) -> str | None:
        return self._async.group_id

    @property
    def member_id(self) -> str:
        return self._async.member_id

    @property
    def generation_id(self) -> int:
        return self._async.generation_id

    @property
    def isolation_level(self) -> str:
        return self._async.isolation_level

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._loop.run(_call(self._async.group_metadata))

    @property
    def client(self) -> Any:
        """The client underneath, as a blocking ``SyncProxy`` (for tools and tests)."""
        return SyncProxy(self._async.client, self._loop)

    def run_async(self, coroutine: Awaitable[Any]) -> Any:
        """Run a coroutine on this consumer's event loop and wait for it."""
        return self._loop.run(coroutine)  # type: ignore[arg-type]

    def subscribe(self, topics: Sequence[str], **callbacks: Any) -> None:
        self._loop.run(_call(self._async.subscribe, topics, **callbacks))

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._loop.run(_call(self._async.assign, list(partitions)))

    def assign_topic(self, topic: str) -> list[TopicPartition]:
        return self._loop.run(self._async.assign_topic(topic))

    def assignment(self) -> list[TopicPartition]:
        return self._loop.run(_call(self._async.assignment))

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        self._loop.run(_call(self._async.seek, partition, offset))

    def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        self._loop.run(_call(self._async.seek_to_beginning, *partitions))

    def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        self._loop.run(_call(self._async.seek_to_end, *partitions))

    def position(self, partition: tuple[str, int]) -> int:
        return self._loop.run(self._async.position(partition))

    def committed(self, partition: tuple[str, int]) -> int | None:
        return self._loop.run(self._async.committed(partition))

    def beginning_offsets(self, topic: str) -> dict[int, int]:
        return self._loop.run(self._async.beginning_offsets(topic))

    def end_offsets(self, topic: str) -> dict[int, int]:
        return self._loop.run(self._async.end_offsets(topic))

    def getmany(
        self, timeout_s: float = 1.0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumedRecord]]:
        return self._loop.run(self._async.getmany(timeout_s, max_records))

    def poll(self, timeout_s: float = 1.0, max_records: int | None = None) -> list[ConsumedRecord]:
        return self._loop.run(self._async.poll(timeout_s, max_records))

    def commit(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        self._loop.run(self._async.commit(offsets))

    def commit_async(
        self,
        offsets: dict[tuple[str, int], int] | None = None,
        callback: Callable[[Exception | None], Any] | None = None,
    ) -> None:
        """Start a commit on the consumer's loop; ``callback(error)`` runs there when done."""
        self._loop.run(_call(self._async.commit_async, offsets, callback))

    def stop(self) -> None:
        """Make ``run`` return; safe from any thread and from signal handlers."""
        self._loop.call_soon(self._async.stop)

    def run(
        self,
        each_message: Callable[[ConsumedRecord], Any] | None = None,
        each_batch: Callable[[list[ConsumedRecord]], Any] | None = None,
        **options: Any,
    ) -> None:
        """``AsyncConsumer.run``, blocking; SIGINT and SIGTERM stop it cleanly."""
        handle_signals = options.pop("handle_signals", True)
        previous: dict[int, Any] = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, lambda *_: self.stop())
        try:
            self._loop.run(
                self._async.run(each_message, each_batch, handle_signals=False, **options)
            )
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._loop.close()

    def close(self) -> None:
        try:
            self._loop.run(self._async.close())
        except ConfigurationError:
            pass  # already closed by run()
        finally:
            self._loop.close()


async def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a plain method of the async consumer on its loop (it owns the state)."""
    return function(*args, **kwargs)
