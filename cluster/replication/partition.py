"""One partition replica and its replication state (Kafka's ``Partition``).

A ``Partition`` is either the leader or a follower of its partition, as the metadata image
says. As leader it appends client batches stamped with its leader epoch, tracks every
follower's log end offset and last caught-up time from their fetches, advances the high
watermark to the minimum log end offset over the ISR, and completes delayed ``acks=all``
produces once the high watermark passes them. As follower it appends the leader's batches
with their offsets, keeps the leader-epoch cache from the batches' epochs, truncates a
divergent tail when the leader says where the common history ends, and follows the leader's
high watermark.

A replica whose log directory failed (``go_offline``: a full disk, EIO, a read-only file
system) is *offline*: it neither leads nor follows, answers KAFKA_STORAGE_ERROR and touches
its log no more until the node restarts (``docs/operations.md``, "Disk faults").

Invariants (asserted): ``high_watermark <= log.log_end_offset``; ``leader_epoch`` never
decreases; the leader's high watermark never decreases while it leads; an offline replica is
never leader.

Thread-safety: none; one owner (the broker's event loop).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flux.controller.image import PartitionState
from flux.protocol.control import ControlMarker, control_marker, end_txn_marker_batch
from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.protocol.records import BatchHeader, build_batch, decode_records, iter_batches
from flux.storage import AppendResult, LogDirectoryError, MemoryLog, PartitionLog
from flux.storage.compaction import align_to
from flux.storage.leader_epochs import UNDEFINED_EPOCH, LeaderEpochCache
from flux.storage.producer_state import (
    CompletedTxn,
    ProducerStateManager,
    Verdict,
    increment_sequence,
)
from flux.storage.txn_index import AbortedTxn

from ..http.dedup import MessageIdIndex, may_carry_ids, message_ids_in
from ..topics import TopicConfig
from .wire import PartitionData

if TYPE_CHECKING:
    from .session import FetchSession

__all__ = ["DelayedProduce", "FollowerState", "Partition", "ProducerRejectedError"]

log = logging.getLogger("flux.cluster.partition")


_VERDICT_ERRORS = {
    Verdict.OUT_OF_ORDER: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    Verdict.INVALID_EPOCH: ErrorCode.INVALID_PRODUCER_EPOCH,
    Verdict.UNKNOWN_PRODUCER: ErrorCode.UNKNOWN_PRODUCER_ID,
    Verdict.DUPLICATE: ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
}


class ProducerRejectedError(Exception):
    """An idempotent batch refused by the producer state (nothing was appended)."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def _ignore_change(partition: Partition) -> None:
    """The default ``Partition.on_change``: nobody is watching."""


@dataclass
class FollowerState:
    """What the leader knows of one follower, from its fetches."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_offset_at_last_fetch: int = -1
    #: The follower's fetch sessions holding this partition (one, or briefly two while a
    #: reconnect replaces the old one): they are told of appends and high watermark moves,
    #: and while one lives an idle, caught-up follower stays caught up.
    sessions: set[FetchSession] = field(default_factory=set)


@dataclass
class DelayedProduce:
    """An ``acks=all`` append waiting for the high watermark to reach ``required_offset``."""

    required_offset: int
    future: asyncio.Future[ErrorCode]


@dataclass(eq=False)
class Partition:
    broker_id: int
    topic: str
    topic_id: str
    index: int
    log: PartitionLog | MemoryLog
    config: TopicConfig
    state: PartitionState
    epochs: LeaderEpochCache
    producers: ProducerStateManager = field(default_factory=ProducerStateManager)
    high_watermark: int = 0
    is_leader: bool = False
    followers: dict[int, FollowerState] = field(default_factory=dict)
    delayed: list[DelayedProduce] = field(default_factory=list)
    waiters: set[asyncio.Future[None]] = field(default_factory=set)
    clock_ms: Callable[[], int] = monotonic_ms
    dedup: MessageIdIndex = field(default_factory=lambda: MessageIdIndex(0))
    #: Called with this partition whenever its log, high watermark, role, state or a
    #: follower's position changes, so that the owner's periodic work (flush, checkpoints,
    #: ISR checks) visits the partitions that changed instead of every partition it hosts.
    on_change: Callable[[Partition], None] = _ignore_change
    #: The ISR this leader proposed and the controller has not decided yet. Until it does, the
    #: high watermark waits for its members too (Kafka's "maximal ISR", KIP-497): the commit
    #: that adds a replica can also make it leader (a reassignment completing), so it must
    #: already hold every record acknowledged while the proposal was in flight.
    pending_isr: frozenset[int] = frozenset()
    #: This replica's log directory failed (``go_offline``): it serves nothing until restart.
    offline: bool = False
    #: Transaction verification in progress (KIP-890): producer id -> the token of the
    #: verification asked for its first transactional batch here. A marker for the producer
    #: removes it, so a verification that raced with the transaction's end is not trusted
    #: (Kafka's ``VerificationGuard``).
    txn_verifications: dict[int, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.high_watermark = min(
            max(self.high_watermark, self.log.log_start_offset), self.log.log_end_offset
        )
        #: ``topic-index``: this replica's directory name and checkpoint key.
        self.key = f"{self.topic}-{self.index}"

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """Where ``read_committed`` readers stop: the high watermark, or the first offset of
        the oldest open transaction when that is lower (Kafka's LSO)."""
        first = self.producers.first_unstable_offset()
        return self.high_watermark if first is None else min(first, self.high_watermark)

    # -- roles --------------------------------------------------------------------------------

    def become_leader(self, state: PartitionState) -> None:
        assert state.leader == self.broker_id
        assert state.leader_epoch >= self.state.leader_epoch, "leader epochs never go back"
        self.state = state
        self.pending_isr = frozenset()
        self.is_leader = True
        self.epochs.assign(state.leader_epoch, self.log_end_offset)
        if self.dedup.covered_end < self.log_end_offset:
            self.rebuild_dedup()  # the window survives failover: ids come from the log
        now = self.clock_ms()
        # Sessions holding this partition at an older epoch are told, so they answer with the
        # fencing error and the followers name it again at the new epoch.
        self.notify_sessions(urgent=True)
        # Followers start as "caught up now", so a new leader does not drop them from the ISR
        # before they had a chance to fetch from it.
        self.followers = {
            replica: FollowerState(last_caught_up_ms=now)
            for replica in state.replicas
            if replica != self.broker_id
        }
        self.maybe_advance_high_watermark()
        self.wake_waiters()
        self.on_change(self)

    def go_offline(self) -> None:
        """The log directory failed: stop leading and following at once. Waiting ``acks=all``
        produces fail with KAFKA_STORAGE_ERROR (not acknowledged: the client retries on the
        new leader), followers' sessions are told (they get the same error), client fetches
        waiting here return. The role in the metadata stays until the controller moves it."""
        if self.offline:
            return
        self.offline = True
        self.is_leader = False
        self.pending_isr = frozenset()
        self.fail_delayed(ErrorCode.KAFKA_STORAGE_ERROR)
        self.notify_sessions(urgent=True)
        self.wake_waiters()

    def become_follower(self, state: PartitionState) -> None:
        assert state.leader_epoch >= self.state.leader_epoch, "leader epochs never go back"
        self.state = state
        self.pending_isr = frozenset()
        self.is_leader = False
        self.notify_sessions(urgent=True)  # they answer NOT_LEADER_OR_FOLLOWER and forget it
        self.followers = {}
        self.fail_delayed(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.wake_waiters()
        self.on_change(self)

    def update_state(self, state: PartitionState) -> None:
        """A new ISR (or epochs) for the same role: the high watermark may move."""
        if state.partition_epoch != self.state.partition_epoch:
            self.pending_isr = frozenset()  # the proposal was decided (or overtaken)
        self.state = state
        if self.is_leader:
            for replica in state.replicas:
                if replica != self.broker_id:
                    self.followers.setdefault(
                        replica, FollowerState(last_caught_up_ms=self.clock_ms())
                    )
            self.maybe_advance_high_watermark()
            self._complete_delayed()
        self.on_change(self)

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode | None:
        """Kafka's fencing of a client's view: -1 means "no opinion"."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return None
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.FENCED_LEADER_EPOCH

    # -- leader -------------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | memoryview,
        *,
        markers: bool = False,
        coordinator: bool = False,
        known_ids: list[list[tuple[int, str]]] | None = None,
    ) -> AppendResult:
        """Append client batches stamped with this leader's epoch. Idempotent batches are
        checked against the producer state first: a retried batch already in the log is not
        written again (the result carries its original offsets); a sequence gap or a fenced
        epoch raises ``ProducerRejectedError`` and nothing is written. Control batches
        (transaction markers) only with ``markers`` (``write_txn_marker``): a client may not
        write them. ``coordinator``: a coordinator's own transactional batch (TxnOffsetCommit),
        without sequence numbers, so not checked against the producer state. ``known_ids``: the
        ``message_ids_in`` of each batch, from a caller that built the batches, looked each id
        up in ``dedup`` and left repeats out, with no await since (the HTTP front door): they
        are neither decoded nor looked up again here."""
        assert self.is_leader, "only a leader appends client batches"
        batches = list(iter_batches(records, allow_partial_tail=False))
        headers = [header for header, _ in batches]
        if not markers and any(header.is_control for header in headers):
            raise ProducerRejectedError(
                ErrorCode.INVALID_RECORD, "control batches are written by transaction coordinators"
            )
        with_ids = self.dedup.enabled and (
            any(known_ids) if known_ids is not None else may_carry_ids(records, headers)
        )
        ids: list[list[tuple[int, str]]] | None = None
        if with_ids and known_ids is not None:
            ids = known_ids
        elif with_ids:
            deduplicated = self._drop_duplicate_ids(batches)
            if isinstance(deduplicated, AppendResult):
                return deduplicated
            if isinstance(deduplicated, list):
                ids = deduplicated  # nothing dropped: the ids already decoded, per batch
            else:
                records = deduplicated
                batches = list(iter_batches(records, allow_partial_tail=False))
                headers = [header for header, _ in batches]
        if isinstance(self.log, MemoryLog):
            self._check_memory_room(len(records))
        duplicates = []
        for header in headers:
            if header.producer_id < 0 or header.is_control or coordinator:
                continue
            check = self.producers.check(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                increment_sequence(header.base_sequence, header.last_offset_delta),
            )
            if check.verdict is Verdict.DUPLICATE:
                duplicates.append(check.duplicate_of)
            elif check.verdict is not Verdict.APPEND:
                raise ProducerRejectedError(
                    _VERDICT_ERRORS[check.verdict],
                    f"producer {header.producer_id} epoch {header.producer_epoch} sequence "
                    f"{header.base_sequence}: {check.verdict.value}",
                )
        if duplicates:
            if len(duplicates) != len(headers):
                raise ProducerRejectedError(
                    ErrorCode.DUPLICATE_SEQUENCE_NUMBER, "a request mixes retried and new batches"
                )
            first, last = duplicates[0], duplicates[-1]
            assert first is not None and last is not None
            return AppendResult(
                base_offset=first.first_offset,
                last_offset=last.last_offset,
                batch_count=len(headers),
                record_count=sum(h.records_count for h in headers),
                max_timestamp=last.timestamp_ms,
                log_append_time_ms=-1,
            )
        result = self.log.append(records, leader_epoch=self.leader_epoch)
        self._record_producers(batches, first_offset=result.base_offset)
        if with_ids:
            self.dedup.observe_batches(
                records, base_offset=result.base_offset, ids=ids, batches=batches
            )
        else:
            self.dedup.covered_end = self.log_end_offset
        self.maybe_advance_high_watermark()
        self.wake_waiters()
        self.notify_sessions(urgent=True)
        self.on_change(self)
        return result

    def _drop_duplicate_ids(
        self, batches: list[tuple[BatchHeader, memoryview]]
    ) -> list[list[tuple[int, str]]] | bytes | AppendResult:
        """Leave out records whose ``flux-msg-id`` was stored within the dedup window.

        A request whose every record is such a repeat is answered with the offsets first given
        to them (nothing is appended). A batch of which only some records repeat is re-encoded
        without them, unless it is idempotent or transactional: its sequence numbers must stay
        as the producer wrote them, so it is appended whole (documented in docs/http-api.md).
        Returns the re-encoded records, or, when nothing was left out, the ids found in each
        batch (``message_ids_in``), so the append does not decode them again. ``batches``:
        ``iter_batches`` of the request's records, as the append parsed them.
        """
        kept: list[bytes | memoryview] = []
        original: list[int] = []
        changed = False
        seen: set[str] = set()
        found: list[list[tuple[int, str]]] = []
        for header, raw in batches:
            batch_ids = message_ids_in(raw, header)
            found.append(batch_ids)
            ids = dict(batch_ids)
            repeats = {}
            for delta, message_id in ids.items():
                stored = self.dedup.lookup(message_id)
                if stored is not None:
                    repeats[delta] = stored
                elif message_id in seen:
                    repeats[delta] = -1  # repeated inside this request: stored once
                seen.add(message_id)
            original.extend(offset for offset in repeats.values() if offset >= 0)
            if not repeats:
                kept.append(raw)
            elif len(repeats) == header.records_count:
                changed = True
            elif header.producer_id >= 0 or header.is_transactional:
                kept.append(raw)
            else:
                kept.append(_without_records(raw, set(repeats)))
                changed = True
        if not changed:
            return found
        if not kept:
            first = min(original) if original else self.log_end_offset
            last = max(original) if original else first
            return AppendResult(
                base_offset=first,
                last_offset=last,
                batch_count=0,
                record_count=0,
                max_timestamp=-1,
                log_append_time_ms=-1,
            )
        return b"".join(bytes(part) for part in kept)

    def _check_memory_room(self, incoming_bytes: int) -> None:
        """A memory topic holds at most ``memory.bytes.max`` per partition: refuse, never grow
        without bound (the cleanup task makes room by removing acknowledged, expired data)."""
        limit = self.config.get("memory.bytes.max")
        held = self.log.size_bytes
        if held + incoming_bytes > limit:
            raise ProducerRejectedError(
                ErrorCode.POLICY_VIOLATION,
                f"memory topic {self.topic}-{self.index} is full: it holds {held} bytes, "
                f"memory.bytes.max is {limit}; messages are removed once past message.ttl.ms "
                f"and acknowledged by every subscription and group",
            )

    def rebuild_dedup(self, read_bytes: int = 8 << 20) -> int:
        """Replay the log's batches within the dedup window into the id index."""
        index = self.dedup
        if not index.enabled:
            index.covered_end = self.log_end_offset
            return 0
        start = max(index.covered_end, self.log.log_start_offset)
        found_at = self.log.offset_for_timestamp(int(time.time() * 1000) - index.window_ms)
        if found_at is not None:
            start = max(start, found_at[0])
        else:
            start = self.log_end_offset
        found = 0
        offset = start
        while offset < self.log_end_offset:
            data = self.log.read(offset, read_bytes)
            batches = list(iter_batches(data))
            if not batches:
                break
            found += index.rebuild(batches, end=batches[-1][0].next_offset)
            offset = batches[-1][0].next_offset
        index.covered_end = self.log_end_offset
        return found

    def write_txn_marker(
        self, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int
    ) -> AppendResult:
        """Append the commit or abort marker of ``producer_id``'s transaction (Kafka's
        WriteTxnMarkers, as this partition's leader). A marker older than the producer's
        epoch here is refused (``INVALID_PRODUCER_EPOCH``): a newer coordinator decision
        already ended that epoch. So is a marker from a coordinator older than the one that
        wrote the producer's last marker here (``TRANSACTION_COORDINATOR_FENCED``): that
        coordinator lost the transaction to a newer one, whose decision stands."""
        epoch = self.producers.epoch_of(producer_id)
        if epoch is not None and producer_epoch < epoch:
            raise ProducerRejectedError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"marker of producer {producer_id} at epoch {producer_epoch} < {epoch}",
            )
        newest = self.producers.coordinator_epoch_of(producer_id)
        if coordinator_epoch < newest:
            raise ProducerRejectedError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}"
                f" < {newest}",
            )
        batch = end_txn_marker_batch(
            producer_id, producer_epoch, commit=commit, coordinator_epoch=coordinator_epoch
        )
        self.txn_verifications.pop(producer_id, None)
        return self.append_as_leader(batch, markers=True)

    def _record_producers(
        self, batches: list[tuple[BatchHeader, memoryview]], *, first_offset: int | None
    ) -> None:
        """Remember appended batches (``iter_batches`` of the append) in the producer state
        (``first_offset``: where the log placed the first one on the leader; None keeps the
        batches' own offsets), and index the transactions their markers abort."""
        offset = first_offset
        for header, raw in batches:
            base = header.base_offset if offset is None else offset
            marker = None
            if header.is_control and header.producer_id >= 0:
                marker = _control_marker_or_none(raw)
            completed = self.producers.record_batch_header(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.records_count,
                base,
                header.last_offset_delta,
                header.max_timestamp,
                is_control=header.is_control,
                is_transactional=header.is_transactional,
                control_type=None if marker is None else marker.kind,
                coordinator_epoch=-1 if marker is None else marker.coordinator_epoch,
            )
            if completed is not None and completed.is_aborted:
                self.index_abort(completed)
            if offset is not None:
                offset = base + header.last_offset_delta + 1

    def index_abort(self, completed: CompletedTxn) -> None:
        """Add an aborted transaction to the log's index (``storage.txn_index``)."""
        self.log.txn_index.append(
            AbortedTxn.ended(
                completed.producer_id,
                completed.first_offset,
                completed.last_offset,
                self.producers.first_unstable_offset(),
            )
        )

    def record_follower_fetch(self, replica: int, fetch_offset: int) -> None:
        """A follower fetched from ``fetch_offset``: it holds everything below it."""
        follower = self.followers.get(replica)
        if follower is None:
            return
        now = self.clock_ms()
        leader_end = self.log_end_offset
        if fetch_offset >= leader_end:
            follower.last_caught_up_ms = now
        elif fetch_offset >= follower.leader_end_offset_at_last_fetch >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        if follower.log_end_offset != fetch_offset or replica not in self.state.isr:
            # Progress, or a replica outside the ISR that may rejoin it (say, back from a
            # restart at the very offset the leader last saw): the ISR manager looks again.
            follower.log_end_offset = fetch_offset
            self.on_change(self)
        follower.leader_end_offset_at_last_fetch = leader_end
        follower.last_fetch_ms = now
        if self.maybe_advance_high_watermark():
            self.wake_waiters()

    def under_min_isr(self) -> bool:
        """Fewer ISR members (those of a proposed ISR not yet decided counted too: the
        maximal ISR) than ``min.insync.replicas``, or than the replicas when there are fewer
        of them (Kafka's effective min ISR)."""
        isr = self.state.isr
        members = len(self.pending_isr.union(isr)) if self.pending_isr else len(isr)
        return members < min(self.config.get("min.insync.replicas"), len(self.state.replicas))

    def maybe_advance_high_watermark(self) -> bool:
        """High watermark = min log end offset over the ISR and the members of a proposed
        ISR not yet decided (``pending_isr``); it only moves forward, and not at all while
        the partition is under its min ISR (Kafka's "strict min ISR" rule of KIP-966).

        The rule is what makes the ELR safe: a replica that left an ISR smaller than
        ``min.insync.replicas`` may be elected (``flux.controller.election``) although it
        lacks what the leader appended after it left. Without the rule, consumers could read
        those records from the shrunken leader and see them replaced after the election
        (found by ``fluxctl chaos run mixed --seed 2 --duration 20 --netns --disks``: the
        partitioned leader's ISR shrank to itself alone, consumers read three records past
        the old high watermark, the controller elected an ELR member, and the offsets were
        reused for other records). Writes with ``acks=0`` or ``1`` to a partition under its
        min ISR become readable once the ISR is whole again."""
        if not self.is_leader or self.under_min_isr():
            return False
        candidate = self.log_end_offset
        members = self.state.isr if not self.pending_isr else self.pending_isr | set(self.state.isr)
        for replica in members:
            if replica == self.broker_id:
                continue
            follower = self.followers.get(replica)
            candidate = min(candidate, follower.log_end_offset if follower else -1)
        if candidate <= self.high_watermark:
            return False
        assert candidate <= self.log_end_offset
        self.high_watermark = candidate
        self._complete_delayed()
        self.notify_sessions(urgent=False)
        self.on_change(self)
        return True

    def propose_isr(self, isr: Collection[int]) -> None:
        """This leader is sending ``isr`` to the controller (see ``pending_isr``)."""
        self.pending_isr = frozenset(isr)

    def proposal_failed(self, state: PartitionState) -> None:
        """The ISR proposed at ``state`` was refused or not delivered: the high watermark goes
        by the ISR alone again (unless the state moved on meanwhile)."""
        if self.state is state and self.pending_isr:
            self.pending_isr = frozenset()
            self.maybe_advance_high_watermark()

    def add_delayed_produce(self, required_offset: int) -> asyncio.Future[ErrorCode]:
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        if self.high_watermark >= required_offset:
            future.set_result(self._after_append_check())
        elif self.is_leader and self.under_min_isr():
            future.set_result(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        else:
            self.delayed.append(DelayedProduce(required_offset, future))
        return future

    def _after_append_check(self) -> ErrorCode:
        if len(self.state.isr) < self.config.get("min.insync.replicas"):
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def _complete_delayed(self) -> None:
        """Answer the waiting ``acks=all`` produces the high watermark passed; while the
        partition is under its min ISR, answer every one NOT_ENOUGH_REPLICAS_AFTER_APPEND
        (written, not acknowledged: the high watermark does not move until the ISR is whole
        again, and the producer may retry meanwhile)."""
        if self.is_leader and self.under_min_isr():
            self.fail_delayed(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
            return
        waiting = []
        for delayed in self.delayed:
            if delayed.future.done():
                continue
            if self.high_watermark >= delayed.required_offset:
                delayed.future.set_result(self._after_append_check())
            else:
                waiting.append(delayed)
        self.delayed = waiting

    def fail_delayed(self, error: ErrorCode) -> None:
        for delayed in self.delayed:
            if not delayed.future.done():
                delayed.future.set_result(error)
        self.delayed = []

    def lagging_followers(self, lag_time_max_ms: int) -> list[int]:
        """ISR members that have not caught up within ``lag_time_max_ms``.

        A follower whose session holds this partition names it in a request only when its
        position moves; while it has the whole log, every request of its session is a fetch
        at the log end, so it was caught up at the session's last request.
        """
        now = self.clock_ms()
        lagging = []
        for replica in self.state.isr:
            if replica == self.broker_id:
                continue
            follower = self.followers.get(replica, FollowerState())
            caught_up = follower.last_caught_up_ms
            if follower.sessions and follower.log_end_offset >= self.log_end_offset:
                caught_up = max(
                    caught_up, *(session.last_fetch_ms for session in follower.sessions)
                )
            if now - caught_up > lag_time_max_ms:
                lagging.append(replica)
        return lagging

    def caught_up_followers(self) -> list[int]:
        """Replicas outside the ISR whose log reached the high watermark and the start of the
        current leader epoch: they may rejoin the ISR."""
        epoch_start = next(
            (start for epoch, start in reversed(self.epochs.entries) if epoch == self.leader_epoch),
            self.log_end_offset,
        )
        return [
            replica
            for replica, follower in self.followers.items()
            if replica not in self.state.isr
            and follower.log_end_offset >= max(self.high_watermark, epoch_start)
        ]

    def serve_follower_fetch(
        self,
        replica: int,
        *,
        fetch_offset: int,
        last_fetched_epoch: int,
        max_bytes: int,
        record: bool = True,
    ) -> PartitionData:
        """The leader's answer to one partition of a follower fetch.

        A follower whose last fetched epoch ends earlier here than its fetch offset (or that
        this log never had) gets the diverging epoch and where it ends, and no records: it
        truncates there and fetches again. Otherwise its fetch offset is recorded as its log
        end (``record``) and the batches from there are returned as they lie in the log.
        """
        assert self.is_leader
        common = {
            "high_watermark": self.high_watermark,
            "log_start_offset": self.log.log_start_offset,
            "leader_epoch": self.leader_epoch,
        }
        if last_fetched_epoch >= 0:
            epoch, end = self.epochs.end_offset_for(last_fetched_epoch, self.log_end_offset)
            if epoch == UNDEFINED_EPOCH:
                # No epoch this old here (say, the follower led an epoch that wrote nothing):
                # the shared history can only be what precedes this log's start.
                end = self.log.log_start_offset
                diverged = fetch_offset > end
            else:
                diverged = epoch != last_fetched_epoch or end < fetch_offset
            if diverged:
                return PartitionData(
                    self.topic,
                    self.index,
                    ErrorCode.NONE,
                    **common,
                    diverging_epoch=epoch,
                    diverging_end_offset=end,
                )
        if not self.log.log_start_offset <= fetch_offset <= self.log_end_offset:
            return PartitionData(self.topic, self.index, ErrorCode.OFFSET_OUT_OF_RANGE, **common)
        if record:
            self.record_follower_fetch(replica, fetch_offset)
            common["high_watermark"] = self.high_watermark
        records = b""
        if fetch_offset < self.log_end_offset and max_bytes > 0:
            try:
                records = self.log.read(fetch_offset, max_bytes)
            except LogDirectoryError:
                # The log's failure took this replica offline (``go_offline``) already.
                return PartitionData(
                    self.topic, self.index, ErrorCode.KAFKA_STORAGE_ERROR, **common
                )
            if self.config.compacted:
                # Our cleaner may have merged removed batches into a span the follower's log
                # ends inside: serve the span from where the follower is.
                records = align_to(records, fetch_offset)
        return PartitionData(self.topic, self.index, ErrorCode.NONE, **common, records=records)

    # -- follower -----------------------------------------------------------------------------

    def apply_fetch_answer(self, answer: PartitionData) -> str | None:
        """Apply the leader's answer for this partition; a description of what went wrong
        (for the log) or None. Raises StorageError/CorruptRecordError on bad batches."""
        if answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self.log_end_offset < answer.log_start_offset:
                self.restart_at(answer.log_start_offset)
                return f"behind the leader's log start {answer.log_start_offset}: restarted there"
            target = max(answer.high_watermark, self.log.log_start_offset)
            self.truncate_to(target)
            return f"ahead of the leader: truncated to its high watermark {target}"
        if answer.error_code != ErrorCode.NONE:
            return f"leader answered error {answer.error_code}"
        if answer.diverging_epoch >= 0 or answer.diverging_end_offset >= 0:
            before = self.log_end_offset
            target = self.divergence_point(answer.diverging_epoch, answer.diverging_end_offset)
            self.truncate_to(target)
            return (
                f"diverged (leader's epoch {answer.diverging_epoch} ends at "
                f"{answer.diverging_end_offset}): truncated {before} -> {self.log_end_offset}"
            )
        if answer.records:
            records, batches = self._past_log_end(answer.records)
            if batches:
                self.append_as_follower(records, batches)
        self.follow_high_watermark(answer.high_watermark)
        if answer.log_start_offset > self.log.log_start_offset:
            start = min(answer.log_start_offset, self.log_end_offset)
            self.log.delete_records_before(start)
            self.epochs.truncate_from_start(start)
            self.producers.truncate_before(start)
            self.on_change(self)
        return None

    def _past_log_end(
        self, records: bytes | memoryview
    ) -> tuple[bytes, list[tuple[BatchHeader, memoryview]]]:
        """The batches of a fetch answer from this log's end on, as bytes and as
        ``iter_batches`` of them. With two fetch requests in flight, the second can name a
        position the answer to the first has already moved past, and the leader then sends
        those batches again; Kafka's fetcher drops such a stale answer too. Batches wholly below
        the log end are what this log already holds from this leader (the leader checked the
        position's epoch), so they are skipped; a batch across the log end is left for
        ``append_as_follower`` to refuse."""
        end = self.log_end_offset
        batches = list(iter_batches(records, allow_partial_tail=False))
        skip = 0
        while skip < len(batches) and batches[skip][0].next_offset <= end:
            skip += 1
        if skip == 0:
            return bytes(records), batches  # the usual answer: it starts where this log ends
        skipped = sum(len(batch) for _, batch in batches[:skip])
        return bytes(memoryview(records)[skipped:]), batches[skip:]

    def append_as_follower(
        self, records: bytes, batches: list[tuple[BatchHeader, memoryview]] | None = None
    ) -> None:
        """Append the leader's batches with their offsets; learn epochs from them.
        ``batches``: ``iter_batches(records)`` as a list, when the caller already parsed it."""
        first_of_epoch: list[tuple[int, int]] = []
        latest = self.epochs.latest_epoch
        if batches is None:
            batches = list(iter_batches(records, allow_partial_tail=False))
        headers = [header for header, _ in batches]
        for header in headers:
            if header.partition_leader_epoch > latest:
                latest = header.partition_leader_epoch
                first_of_epoch.append((latest, header.base_offset))
        self.log.append(records, assign_offsets=False)
        for epoch, start in first_of_epoch:
            self.epochs.assign(epoch, start)
        # Followers keep producer state and message ids too, so a new leader deduplicates
        # retries at once.
        self._record_producers(batches, first_offset=None)
        if self.dedup.enabled and may_carry_ids(records, headers):
            self.dedup.observe_batches(records, batches=batches)
        else:
            self.dedup.covered_end = self.log_end_offset
        self.on_change(self)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        self.producers.truncate_to(self.log_end_offset)
        self.dedup.truncate_to(self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.on_change(self)

    def restart_at(self, offset: int) -> None:
        """The leader no longer has what we have: start an empty log at ``offset``."""
        self.log.truncate_fully_and_start_at(offset)
        self.epochs.clear()
        self.producers = ProducerStateManager(last_offset=offset)
        self.dedup.restart_at(offset)
        self.high_watermark = offset
        self.on_change(self)

    def follow_high_watermark(self, leader_high_watermark: int) -> None:
        high_watermark = max(
            min(leader_high_watermark, self.log_end_offset), self.log.log_start_offset
        )
        if high_watermark != self.high_watermark:
            self.high_watermark = high_watermark
            self.on_change(self)

    def divergence_point(self, leader_epoch: int, leader_end_offset: int) -> int:
        """Where to truncate when the leader says its ``leader_epoch`` ends at
        ``leader_end_offset``: the end of the history both logs share."""
        own_epoch, own_end = self.epochs.end_offset_for(leader_epoch, self.log_end_offset)
        if own_epoch == UNDEFINED_EPOCH:
            return min(leader_end_offset, self.log_end_offset)
        return min(leader_end_offset, own_end, self.log_end_offset)

    # -- shared -------------------------------------------------------------------------------

    def notify_sessions(self, *, urgent: bool) -> None:
        """Tell the followers' fetch sessions that this partition has news: data or a role
        change (``urgent``: answered at once), or a new high watermark or log start (sent
        with their next answer)."""
        key = (self.topic, self.index)
        for follower in self.followers.values():
            for session in follower.sessions:
                session.mark(key, urgent=urgent)

    def wake_waiters(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()


def _without_records(raw: bytes | memoryview, drop: set[int]) -> bytes:
    """One uncompressed-or-compressed, non-idempotent batch re-encoded without the records at
    offset deltas ``drop`` (kept records keep their order, keys, values, headers, timestamps)."""
    header = next(iter_batches(raw))[0]
    kept = [
        (record.key, record.value, record.headers, record.timestamp)
        for record in decode_records(bytes(raw), verify_crc=False)
        if record.offset - header.base_offset not in drop
    ]
    return build_batch(kept, compression=header.compression)


def _control_marker_or_none(batch: bytes | memoryview) -> ControlMarker | None:
    """The control record of a stored control batch; None (no transaction ends) when it
    cannot be read, which the log's own validation would have refused."""
    try:
        return control_marker(batch)
    except CorruptRecordError:
        log.warning("a control batch without a readable control record")
        return None
