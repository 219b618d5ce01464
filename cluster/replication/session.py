"""Leader side of replication: one fetch session per follower connection (KIP-227's
incremental fetch sessions, over one long-lived WebSocket instead of a request per round).

A follower opens ``GET /replication/session`` on the leader's HTTP port and keeps it open. The
``FetchSession`` holds, per partition the follower fetches here, its fetch position (offset,
last fetched epoch, the leader epoch it follows, its topic id) and the high watermark and log
start last sent to it. A request names only what changed; the answer names only partitions
with news. An idle session therefore costs one small request and one empty answer per
``max_wait_ms``, whatever the number of partitions, and a busy one costs what moved.

How a partition gets into an answer:

- **urgent** (answered at once, the parked request returns): the follower named it in this
  request (its position moved), the leader appended to it (``Partition`` marks every session
  of its followers), it changed role, or its data did not fit the previous answer;
- **lazy** (carried by the next answer, whenever that is sent): its high watermark or log start
  moved, so the follower learns them without a round of its own, as with Kafka.

Records sent move the session's position for the partition to the end of what was sent, so a
request the follower sent before applying that answer does not get the same batches twice,
unless it names the partition: its position is then the follower's word, and the follower
skips the batches it already holds (``Partition._past_log_end``). The
position the leader *records* for the follower (its log end, what the high watermark and ISR
use) comes only from the follower's requests, which confirm what it appended.

An answer with an error or a divergence drops the partition from the session: the follower
truncates (or backs off) and names it again with its new position.

Requests are served in order, one at a time. A request that arrives while the previous one is
parked ends that wait: the parked one is answered with what it has (often nothing), then the
new one is served, so a follower can tell the leader about new partitions at once.

A follower counts as caught up on an idle partition as long as its session is alive: see
``Partition.lagging_followers``.

A replica that a reassignment is adding takes its data through the broker's
``ReplicationThrottle`` (``throttle.py``) when one is set: its share of an answer is capped by
the bucket, and when the bucket is empty the partition waits, out of the answer, until it
refills; other partitions are never held back by it.

Thread-safety: none; the broker's event loop owns every session.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from flux.controller.image import MetadataImage
from flux.protocol.errors import ErrorCode
from flux.protocol.records import iter_batches

from .partition import Partition, monotonic_ms
from .throttle import ReplicationThrottle
from .wire import FetchEntry, FetchRequest, PartitionData

__all__ = ["FetchSession", "MAX_SESSION_WAIT_MS", "MAX_SESSION_RESPONSE_BYTES"]

MAX_SESSION_WAIT_MS = 10_000
MAX_SESSION_RESPONSE_BYTES = 32 << 20
#: Requests a follower may have queued on one session; more is a misbehaving peer.
MAX_QUEUED_REQUESTS = 16

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class _Position:
    topic_id: str
    fetch_offset: int
    last_fetched_epoch: int
    leader_epoch: int
    partition_max_bytes: int
    sent_high_watermark: int = -2
    sent_log_start: int = -2


class SessionOverflowError(RuntimeError):
    """The follower queued more requests than ``MAX_QUEUED_REQUESTS``."""


class FetchSession:
    """What the leader knows of one follower connection. ``lookup`` finds a partition this
    broker hosts; ``image`` returns the current metadata image (for the follower's broker
    epoch); ``broker_id`` is this (the leader's) broker."""

    def __init__(
        self,
        *,
        replica_id: int,
        incarnation_id: str,
        broker_id: int,
        lookup: Callable[[str, int], Partition | None],
        image: Callable[[], MetadataImage],
        throttle: ReplicationThrottle | None = None,
    ) -> None:
        self.replica_id = replica_id
        self._throttle = throttle
        self._deferred: set[TopicPartition] = set()
        self.incarnation_id = incarnation_id
        self._broker_id = broker_id
        self._lookup = lookup
        self._image = image
        self.positions: dict[TopicPartition, _Position] = {}
        self._urgent: set[TopicPartition] = set()
        self._lazy: set[TopicPartition] = set()
        self._requests: deque[FetchRequest] = deque()
        # The serving task's wait (for a request, or for news while one is parked): one plain
        # future resolved by ``_wake``, not an Event and ``wait_for`` (a task per wait).
        self._waiter: asyncio.Future[bool] | None = None
        self.last_fetch_ms = 0
        self.closed = False

    # -- events from partitions and the connection ----------------------------------------------

    def mark(self, key: TopicPartition, *, urgent: bool) -> None:
        """Partition ``key`` has news for this follower (see the module docstring)."""
        if key not in self.positions:
            return
        if urgent:
            self._urgent.add(key)
            self._wake()
        else:
            self._lazy.add(key)

    def push(self, request: FetchRequest) -> None:
        """A request arrived on the connection; it ends the wait of a parked one."""
        if len(self._requests) >= MAX_QUEUED_REQUESTS:
            raise SessionOverflowError(
                f"follower {self.replica_id} queued more than {MAX_QUEUED_REQUESTS} requests"
            )
        self._requests.append(request)
        self._wake()

    async def next_request(self) -> FetchRequest | None:
        """The next request to serve, or None once the session is closed."""
        while not self._requests:
            if self.closed:
                return None
            await self._wait(None)
        return self._requests.popleft()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    async def _wait(self, timeout_s: float | None) -> bool:
        """Until ``_wake`` (True) or ``timeout_s`` passes (False); one waiter at a time, the
        serving task's."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = None if timeout_s is None else loop.call_later(timeout_s, _time_out, waiter)
        try:
            return await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def close(self) -> None:
        """Detach from every partition and end any wait."""
        if self.closed:
            return
        self.closed = True
        for key in list(self.positions):
            self._detach(key)
        self.positions.clear()
        self._wake()

    # -- serving --------------------------------------------------------------------------------

    async def serve(self, request: FetchRequest) -> list[PartitionData]:
        """Apply ``request`` to the session and answer it: at once if something is urgent,
        else when something becomes urgent, a newer request arrives, or ``max_wait_ms``
        passes (then with the lazy news only)."""
        if self.closed:
            return []
        self.last_fetch_ms = monotonic_ms()
        answers: list[PartitionData] = []
        confirmed = self._apply_request(request, answers)
        loop = asyncio.get_running_loop()
        max_wait_s = min(max(request.max_wait_ms, 0), MAX_SESSION_WAIT_MS) / 1000
        max_bytes = min(max(request.max_bytes, 1), MAX_SESSION_RESPONSE_BYTES)
        deadline = loop.time() + max_wait_s
        self._collect_urgent(answers, max_bytes, confirmed)
        while not answers and not self.closed and not self._requests:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            if not self._urgent and not await self._wait(remaining):
                break
            self._collect_urgent(answers, max_bytes, frozenset())
        self._collect_lazy(answers)
        return answers

    def _apply_request(
        self, request: FetchRequest, answers: list[PartitionData]
    ) -> frozenset[TopicPartition]:
        """Forget and (re)position partitions; the keys whose positions the follower confirmed."""
        for key in request.forgotten:
            self._forget(key)
        registration = self._image().brokers.get(self.replica_id)
        stale = registration is None or registration.incarnation_id != self.incarnation_id
        confirmed = set()
        for entry in request.entries:
            key = (entry.topic, entry.partition)
            if stale:
                self._forget(key)
                answers.append(PartitionData(*key, ErrorCode.STALE_BROKER_EPOCH))
                continue
            self._position(key, entry)
            confirmed.add(key)
        return frozenset(confirmed)

    def _position(self, key: TopicPartition, entry: FetchEntry) -> None:
        old = self.positions.get(key)
        position = _Position(
            entry.topic_id,
            entry.fetch_offset,
            entry.last_fetched_epoch,
            entry.leader_epoch,
            entry.partition_max_bytes,
        )
        if old is not None and old.topic_id == entry.topic_id:
            position.sent_high_watermark = old.sent_high_watermark
            position.sent_log_start = old.sent_log_start
        self.positions[key] = position
        self._urgent.add(key)

    def _collect_urgent(
        self, answers: list[PartitionData], max_bytes: int, confirmed: frozenset[TopicPartition]
    ) -> None:
        total = sum(len(answer.records) for answer in answers)
        urgent, self._urgent = self._urgent, set()
        for key in urgent:
            held = self._held(key, answers)
            if held is None:
                continue
            position, found = held
            budget = min(position.partition_max_bytes, max_bytes - total)
            throttle = self._throttle
            throttled = (
                throttle is not None
                and throttle.rate is not None
                and self.replica_id in found.state.adding
                and position.fetch_offset < found.log_end_offset
            )
            if throttled:
                assert throttle is not None
                allowed = throttle.available() or 0
                if allowed <= 0:
                    if key in confirmed:
                        # Nothing is sent yet, but the position the follower confirmed is
                        # recorded now: the ISR (which ends the reassignment) goes by it.
                        answer = found.serve_follower_fetch(
                            self.replica_id,
                            fetch_offset=position.fetch_offset,
                            last_fetched_epoch=position.last_fetched_epoch,
                            max_bytes=0,
                        )
                        if answer.error_code != ErrorCode.NONE or answer.diverging_epoch >= 0:
                            answers.append(answer)
                            self._forget(key)
                            continue
                        found.followers[self.replica_id].sessions.add(self)
                    self._defer(key, throttle.wait_s())
                    continue
                budget = min(budget, allowed)
            answer = found.serve_follower_fetch(
                self.replica_id,
                fetch_offset=position.fetch_offset,
                last_fetched_epoch=position.last_fetched_epoch,
                # The first partition with data always gets at least one whole batch.
                max_bytes=max(budget, 1) if total == 0 else budget,
                record=key in confirmed,
            )
            if answer.error_code != ErrorCode.NONE or answer.diverging_epoch >= 0:
                answers.append(answer)
                self._forget(key)
                continue
            found.followers[self.replica_id].sessions.add(self)
            if answer.records:
                total += len(answer.records)
                if throttled:
                    assert throttle is not None
                    throttle.consume(len(answer.records))
                answers.append(answer)
                position.fetch_offset, position.last_fetched_epoch = _end_of(answer.records)
                position.sent_high_watermark = answer.high_watermark
                position.sent_log_start = answer.log_start_offset
                if position.fetch_offset < found.log_end_offset:
                    self._urgent.add(key)  # more than fitted: next answer
            elif position.fetch_offset < found.log_end_offset:
                self._urgent.add(key)  # this answer is full
            elif (
                answer.high_watermark != position.sent_high_watermark
                or answer.log_start_offset != position.sent_log_start
            ):
                self._lazy.add(key)

    def _defer(self, key: TopicPartition, delay_s: float) -> None:
        """Serve ``key`` again once the throttle has refilled (one timer per partition)."""
        if key in self._deferred:
            return
        self._deferred.add(key)

        def due() -> None:
            self._deferred.discard(key)
            self.mark(key, urgent=True)

        asyncio.get_running_loop().call_later(delay_s, due)

    def _collect_lazy(self, answers: list[PartitionData]) -> None:
        if not self._lazy:
            return
        answered = {(answer.topic, answer.partition) for answer in answers}
        lazy, self._lazy = self._lazy, set()
        for key in lazy:
            held = None if key in answered else self._held(key, answers)
            if held is None:
                continue
            position, found = held
            high_watermark = found.high_watermark
            log_start = found.log.log_start_offset
            if (
                high_watermark == position.sent_high_watermark
                and log_start == position.sent_log_start
            ):
                continue
            position.sent_high_watermark = high_watermark
            position.sent_log_start = log_start
            answers.append(
                PartitionData(
                    *key,
                    ErrorCode.NONE,
                    high_watermark=high_watermark,
                    log_start_offset=log_start,
                    leader_epoch=found.leader_epoch,
                )
            )

    def _held(
        self, key: TopicPartition, answers: list[PartitionData]
    ) -> tuple[_Position, Partition] | None:
        """The session's position for ``key`` and the partition it fetches, or None: not in
        the session, or no longer fetchable here (then the error joins ``answers`` and the
        partition leaves the session)."""
        position = self.positions.get(key)
        if position is None:
            return None
        found = self._partition(key, position)
        if isinstance(found, ErrorCode):
            answers.append(PartitionData(*key, found))
            self._forget(key)
            return None
        return position, found

    def _partition(self, key: TopicPartition, position: _Position) -> Partition | ErrorCode:
        partition = self._lookup(*key)
        if partition is None or partition.topic_id != position.topic_id:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if partition.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR  # the leader's log directory failed
        if not partition.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if (
            self.replica_id not in partition.state.replicas
            or self.replica_id == self._broker_id
            or self.replica_id not in partition.followers
        ):
            return ErrorCode.REPLICA_NOT_AVAILABLE
        error = partition.check_leader_epoch(position.leader_epoch)
        return error if error is not None else partition

    def _forget(self, key: TopicPartition) -> None:
        if self.positions.pop(key, None) is not None:
            self._detach(key)
        self._urgent.discard(key)
        self._lazy.discard(key)

    def _detach(self, key: TopicPartition) -> None:
        partition = self._lookup(*key)
        if partition is None:
            return
        follower = partition.followers.get(self.replica_id)
        if follower is not None:
            follower.sessions.discard(self)


def _time_out(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


def _end_of(records: bytes | memoryview) -> tuple[int, int]:
    """The offset after the last batch in ``records`` and that batch's leader epoch (the log
    returns whole batches)."""
    last = None
    for header, _ in iter_batches(records, allow_partial_tail=False):
        last = header
    assert last is not None, "records hold at least one batch"
    return last.next_offset, last.partition_leader_epoch
