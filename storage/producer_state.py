"""Idempotent-producer state of one partition replica (Kafka's ``ProducerStateManager``).

For every producer id that wrote to the partition we remember its epoch and its last
``NUM_BATCHES_TO_RETAIN`` batches (sequence range and offsets). The leader asks ``check``
before appending a batch: a retry of a batch already in the log is answered as a
``DUPLICATE`` with the original offsets, a gap or a stale sequence is ``OUT_OF_ORDER``, a
zombie with an older epoch is ``INVALID_EPOCH``. After every append -- on the leader *and* on
followers, for every replicated batch -- the broker calls ``record`` (or
``record_batch_header``) so that a new leader deduplicates retries after failover.

Pure: no I/O and no clock (``expire`` takes ``now_ms``). Persistence is the caller's:
``snapshot()`` is a JSON-able dict valid up to ``last_offset``; at startup the broker loads
it with ``from_snapshot`` and replays the batch headers from ``last_offset`` to the log end
with ``rebuild_from``.

Decisions (where Kafka leaves a choice or Flux differs):

- Unknown producer: like Kafka 3.x (KIP-360) the first batch of a producer we hold no state
  for is accepted with *any* sequence, because its state may have been lost legitimately
  (expiry, eviction, retention, truncation) while the producer kept counting.
  ``strict_new_producers=True`` instead answers ``UNKNOWN_PRODUCER`` for a first sequence
  other than 0 (the pre-2.5 broker behaviour).
- ``truncate_before`` (log start moved) keeps every producer and its newest batch, like
  Kafka 3.x, which expires producers only by time; dropping them would make the producer's
  next batch look like the first of an unknown producer. Older batches wholly below the new
  log start are forgotten, so a retry of one of them is ``OUT_OF_ORDER``.
- ``truncate_to`` (log end truncated) forgets the retained batches at or after the offset and
  producers left with none. Kafka instead reloads a snapshot and replays; for exactness the
  broker can do the same (``from_snapshot`` + ``rebuild_from``).
- Snapshots keep all retained batches (Kafka keeps only the last one), so deduplication of the
  last five batches survives a restart.
- ``max_producers`` bounds memory: recording a new producer beyond it evicts the least
  recently *recorded* producer. Recording order is log order, so replicas that replayed the
  same log evict the same producers.
- Sequences of a batch come from its ``last_offset_delta`` (Kafka's ``lastSequence()``), which
  stays right after compaction removed records; ``records_count`` is only checked.
- Non-idempotent batches (``producer_id < 0``) only advance ``last_offset``.

Transactions (Kafka's ``currentTxnFirstOffset`` and ``CompletedTxn``): the first offset of a
producer's open transaction in this partition is remembered from its first transactional
batch until its marker (a control batch: commit or abort). ``record_batch_header`` returns the
``CompletedTxn`` a marker ends, so the log can index aborts (``storage.txn_index``);
``first_unstable_offset`` (the smallest open first offset) bounds the last stable offset that
``read_committed`` readers stop at. Open transactions are kept apart from the producer entries:
neither expiry nor the ``max_producers`` bound forgets one (a forgotten open transaction would
make its records visible). A marker with a newer epoch than the producer's (the coordinator
bumped it to fence a zombie, or on timeout) raises the entry's epoch, so the old epoch's
late writes are refused with ``INVALID_EPOCH``; such an entry may hold no batches. Every
marker also records the epoch of the coordinator that wrote it (``coordinator_epoch``), so
that the leader refuses a marker from an older coordinator (Kafka's
``TRANSACTION_COORDINATOR_FENCED``).
The last ``COMPLETED_TXNS_TO_RETAIN`` completed transactions are remembered so that a
truncation that removes a marker re-opens its transaction.

Thread-safety: none; one owner (the task that owns the partition's log). ``producers()``
returns copies.

Invariants (asserted after every change of an entry): an entry holds 1 to
``NUM_BATCHES_TO_RETAIN`` batches (0 only after a marker raised its epoch), whose sequences are contiguous
(each batch starts right after the previous one ends, modulo the wrap) and whose offsets
strictly increase; no batch ends at or beyond ``last_offset``. ``record`` raises
``ProducerStateError`` for a batch that does not lie at or after ``last_offset``.
"""

from __future__ import annotations

import copy
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from flux.storage.errors import StorageError

__all__ = [
    "NO_PRODUCER_ID",
    "MAX_SEQUENCE",
    "NUM_BATCHES_TO_RETAIN",
    "DEFAULT_MAX_PRODUCERS",
    "DEFAULT_PRODUCER_EXPIRATION_MS",
    "SNAPSHOT_VERSION",
    "ProducerStateError",
    "ProducerSnapshotError",
    "BatchMetadata",
    "ProducerEntry",
    "Verdict",
    "Check",
    "ProducerStateManager",
    "increment_sequence",
    "BatchHeaderFields",
    "COMPLETED_TXNS_TO_RETAIN",
    "CompletedTxn",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
]

NO_PRODUCER_ID = -1
# Sequences are int32 and wrap from Int.MaxValue to 0 (Kafka's DefaultRecordBatch).
MAX_SEQUENCE = (1 << 31) - 1
_SEQUENCE_SPACE = MAX_SEQUENCE + 1
# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: a producer has at most 5 in-flight
# requests per connection, so a retry is always of one of its last 5 batches.
NUM_BATCHES_TO_RETAIN = 5
# Named bound on tracked producers per partition (TIGER_STYLE); beyond it the least recently
# recorded producer is evicted.
DEFAULT_MAX_PRODUCERS = 10_000
# Kafka's producer.id.expiration.ms default: 1 day.
DEFAULT_PRODUCER_EXPIRATION_MS = 24 * 60 * 60 * 1000
SNAPSHOT_VERSION = 1
#: Control record types (Kafka's ``ControlRecordType``): an abort and a commit marker.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
#: Completed transactions remembered so that a truncation can re-open them (named bound).
COMPLETED_TXNS_TO_RETAIN = 1000


class ProducerStateError(StorageError):
    """A misuse of ``ProducerStateManager``: a recorded batch lies before the state's end
    offset, or its fields are out of range."""


class ProducerSnapshotError(ProducerStateError):
    """``from_snapshot`` was given data that is not a valid snapshot; rebuild from the log."""


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` in the wrapping sequence space ``[0, MAX_SEQUENCE]``.

    The last sequence of a batch is ``increment_sequence(base_sequence, last_offset_delta)``.
    """
    return (sequence + increment) % _SEQUENCE_SPACE


def _in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == increment_sequence(last_sequence, 1)


@dataclass(frozen=True)
class BatchMetadata:
    """One retained batch of a producer: its sequence range and where it lies in the log."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass
class ProducerEntry:
    """What we know of one producer: its epoch and its newest batches, oldest first."""

    producer_id: int
    producer_epoch: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    last_timestamp_ms: int = -1
    #: The offset of the marker that raised ``producer_epoch`` past the batches' (-1: none).
    marker_offset: int = -1
    #: The epoch of the coordinator that wrote the producer's last marker (-1: none seen).
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset

    def find_batch(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def _check_invariants(self) -> None:
        batches = self.batches
        assert (1 if self.marker_offset < 0 else 0) <= len(batches) <= NUM_BATCHES_TO_RETAIN, (
            f"producer {self.producer_id}"
        )
        for previous, batch in zip(batches, list(batches)[1:], strict=False):
            assert _in_sequence(previous.last_seq, batch.first_seq), (
                f"producer {self.producer_id}: sequence {batch.first_seq} after {previous.last_seq}"
            )
            assert batch.first_offset > previous.last_offset, (
                f"producer {self.producer_id}: offset {batch.first_offset} "
                f"after {previous.last_offset}"
            )


class Verdict(Enum):
    """The answer of ``check`` for one batch (the broker maps it to an error code)."""

    APPEND = "append"  # write it
    DUPLICATE = "duplicate"  # already in the log: answer success with the original offsets
    OUT_OF_ORDER = "out_of_order"  # OUT_OF_ORDER_SEQUENCE_NUMBER
    INVALID_EPOCH = "invalid_epoch"  # INVALID_PRODUCER_EPOCH: fenced by a newer epoch
    UNKNOWN_PRODUCER = "unknown_producer"  # UNKNOWN_PRODUCER_ID (only with strict_new_producers)


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction a marker ended: its producer, its first offset in this partition (the
    marker's own offset when it wrote nothing here), the marker's offset, and how it ended."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True)
class Check:
    verdict: Verdict
    duplicate_of: BatchMetadata | None = None


_APPEND = Check(Verdict.APPEND)
_OUT_OF_ORDER = Check(Verdict.OUT_OF_ORDER)
_INVALID_EPOCH = Check(Verdict.INVALID_EPOCH)
_UNKNOWN_PRODUCER = Check(Verdict.UNKNOWN_PRODUCER)

# One v2 batch header as replayed by ``rebuild_from``: producer id, epoch, base sequence,
# records count, base offset, last offset delta, max timestamp, is control; optionally then
# is transactional and the control record type (``CONTROL_ABORT``/``CONTROL_COMMIT``/None).
BatchHeaderFields = (
    tuple[int, int, int, int, int, int, int, bool]
    | tuple[int, int, int, int, int, int, int, bool, bool, int | None]
    | tuple[int, int, int, int, int, int, int, bool, bool, int | None, int]
)


class ProducerStateManager:
    """Per-partition idempotent-producer state; see the module docstring for the decisions,
    thread-safety (single owner) and invariants."""

    def __init__(
        self,
        *,
        max_producers: int = DEFAULT_MAX_PRODUCERS,
        expiration_ms: int = DEFAULT_PRODUCER_EXPIRATION_MS,
        strict_new_producers: bool = False,
        last_offset: int = 0,
    ) -> None:
        if max_producers < 1:
            raise ValueError(f"max_producers must be at least 1, not {max_producers}")
        if expiration_ms < 0:
            raise ValueError(f"expiration_ms must not be negative, not {expiration_ms}")
        if last_offset < 0:
            raise ValueError(f"last_offset must not be negative, not {last_offset}")
        self._max_producers = max_producers
        self._expiration_ms = expiration_ms
        self._strict_new_producers = strict_new_producers
        # Least recently recorded first.
        self._producers: OrderedDict[int, ProducerEntry] = OrderedDict()
        self._last_offset = last_offset
        # producer id -> first offset of its open transaction here.
        self._ongoing: dict[int, int] = {}
        self._completed: deque[CompletedTxn] = deque(maxlen=COMPLETED_TXNS_TO_RETAIN)

    @property
    def last_offset(self) -> int:
        """The log end offset this state reflects (exclusive, like Kafka's ``mapEndOffset``):
        every batch below it has been recorded; replay resumes here."""
        return self._last_offset

    def last_batch_offsets(self) -> list[int]:
        """The last offset of each producer's newest batch (the batches compaction keeps)."""
        return [
            entry.batches[-1].last_offset for entry in self._producers.values() if entry.batches
        ]

    def epoch_of(self, producer_id: int) -> int | None:
        """The producer's current epoch here (None: no state for it)."""
        entry = self._producers.get(producer_id)
        return None if entry is None else entry.producer_epoch

    def coordinator_epoch_of(self, producer_id: int) -> int:
        """The epoch of the coordinator that wrote the producer's last marker here (-1: none,
        or no state for the producer)."""
        entry = self._producers.get(producer_id)
        return -1 if entry is None else entry.coordinator_epoch

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None: none is open)."""
        return min(self._ongoing.values()) if self._ongoing else None

    def in_transaction(self, producer_id: int) -> bool:
        """Whether ``producer_id`` has a transaction open here."""
        return producer_id in self._ongoing

    def ongoing_transactions(self) -> dict[int, int]:
        """Open transactions: producer id -> first offset."""
        return dict(self._ongoing)

    def producers(self) -> dict[int, ProducerEntry]:
        """Copies of the producer entries, least recently recorded first."""
        return {pid: copy.deepcopy(entry) for pid, entry in self._producers.items()}

    # -- leader path -----------------------------------------------------------------------

    def check(
        self, producer_id: int, producer_epoch: int, base_sequence: int, last_sequence: int
    ) -> Check:
        """Validate a batch before appending it. Never raises and changes nothing."""
        if producer_id < 0:
            return _APPEND  # not idempotent: nothing to check
        if not (0 <= base_sequence <= MAX_SEQUENCE and 0 <= last_sequence <= MAX_SEQUENCE):
            # An idempotent batch without a sequence (-1) can never be placed in order.
            return _OUT_OF_ORDER
        entry = self._producers.get(producer_id)
        if entry is None:
            if self._strict_new_producers and base_sequence != 0:
                return _UNKNOWN_PRODUCER
            return _APPEND
        if producer_epoch < entry.producer_epoch:
            return _INVALID_EPOCH
        if producer_epoch > entry.producer_epoch or not entry.batches:
            # A new epoch (or one a marker started) restarts the sequence at 0.
            return _APPEND if base_sequence == 0 else _OUT_OF_ORDER
        duplicate = entry.find_batch(base_sequence, last_sequence)
        if duplicate is not None:
            return Check(Verdict.DUPLICATE, duplicate)
        if _in_sequence(entry.last_seq, base_sequence):
            return _APPEND
        return _OUT_OF_ORDER

    # -- leader and follower path ----------------------------------------------------------

    def record(
        self,
        producer_id: int,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp_ms: int,
    ) -> None:
        """Remember a batch that is now in the log (after ``check`` said APPEND on the leader;
        for every replicated idempotent batch on a follower)."""
        self._check_batch_position(first_offset, last_offset)
        if producer_id < 0:
            raise ProducerStateError(f"cannot record non-idempotent producer id {producer_id}")
        if not (0 <= first_seq <= MAX_SEQUENCE and 0 <= last_seq <= MAX_SEQUENCE):
            raise ProducerStateError(f"sequence range [{first_seq}, {last_seq}] out of range")
        batch = BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp_ms)
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id, producer_epoch)
            self._producers[producer_id] = entry
        else:
            self._producers.move_to_end(producer_id)
            if (
                entry.producer_epoch != producer_epoch
                or not entry.batches
                or not _in_sequence(entry.last_seq, first_seq)
            ):
                # A new epoch, or (only on a follower whose state diverged from the leader's:
                # the leader had lost this producer's state and accepted any sequence) a batch
                # that does not continue ours. The log is the truth: start over from this
                # batch, as Kafka does for replicated batches, so the retained batches stay
                # contiguous.
                entry.producer_epoch = producer_epoch
                entry.batches.clear()
                entry.marker_offset = -1
        entry.batches.append(batch)  # the deque's maxlen drops the oldest
        entry.last_timestamp_ms = timestamp_ms
        entry._check_invariants()
        self._last_offset = last_offset + 1
        while len(self._producers) > self._max_producers:
            self._producers.popitem(last=False)

    def record_batch_header(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        records_count: int,
        base_offset: int,
        last_offset_delta: int,
        max_timestamp: int,
        *,
        is_control: bool = False,
        is_transactional: bool = False,
        control_type: int | None = None,
        coordinator_epoch: int = -1,
    ) -> CompletedTxn | None:
        """``record`` from the fields of a v2 batch header. Every batch advances
        ``last_offset``; idempotent data batches change producer state, a transactional one
        opens its producer's transaction here, and a marker (``is_control`` with the
        ``control_type`` of its record, written by the coordinator of ``coordinator_epoch``)
        ends it: the ``CompletedTxn`` is returned."""
        if records_count < 0 or last_offset_delta < 0:
            raise ProducerStateError(
                f"batch at {base_offset}: records_count {records_count}, "
                f"last_offset_delta {last_offset_delta}"
            )
        last_offset = base_offset + last_offset_delta
        if producer_id < 0:
            self._check_batch_position(base_offset, last_offset)
            self._last_offset = last_offset + 1
            return None
        if is_control:
            self._check_batch_position(base_offset, last_offset)
            self._last_offset = last_offset + 1
            if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
                return None  # another control record type: no transaction ends
            return self._end_transaction(
                producer_id,
                producer_epoch,
                base_offset,
                control_type,
                max_timestamp,
                coordinator_epoch,
            )
        if is_transactional and base_sequence < 0:
            # A coordinator's own transactional batch (offsets committed in a transaction) has
            # no sequence: it opens the transaction and is not a producer batch.
            self._check_batch_position(base_offset, last_offset)
            self._ongoing.setdefault(producer_id, base_offset)
            self._last_offset = last_offset + 1
            return None
        last_sequence = increment_sequence(base_sequence, last_offset_delta)
        self.record(
            producer_id,
            producer_epoch,
            base_sequence,
            last_sequence,
            base_offset,
            last_offset,
            max_timestamp,
        )
        if is_transactional:
            self._ongoing.setdefault(producer_id, base_offset)
        return None

    def _end_transaction(
        self,
        producer_id: int,
        producer_epoch: int,
        offset: int,
        control_type: int,
        timestamp_ms: int,
        coordinator_epoch: int,
    ) -> CompletedTxn:
        first = self._ongoing.pop(producer_id, None)
        completed = CompletedTxn(
            producer_id,
            offset if first is None else first,
            offset,
            is_aborted=control_type == CONTROL_ABORT,
        )
        self._completed.append(completed)
        entry = self._producers.get(producer_id)
        if entry is None or producer_epoch > entry.producer_epoch:
            # The coordinator moved the producer to a newer epoch: its older one is fenced.
            if entry is None:
                entry = ProducerEntry(producer_id, producer_epoch)
                self._producers[producer_id] = entry
            entry.producer_epoch = producer_epoch
            entry.batches.clear()
            entry.marker_offset = offset
            entry.last_timestamp_ms = max(entry.last_timestamp_ms, timestamp_ms)
            entry._check_invariants()
            while len(self._producers) > self._max_producers:
                self._producers.popitem(last=False)
        if coordinator_epoch >= 0:
            entry.coordinator_epoch = coordinator_epoch
        return completed

    def rebuild_from(
        self,
        headers: Iterable[BatchHeaderFields],
        on_completed: Callable[[CompletedTxn], None] | None = None,
    ) -> int:
        """Replay batch headers ``(producer_id, producer_epoch, base_sequence, records_count,
        base_offset, last_offset_delta, max_timestamp, is_control)``, optionally followed by
        ``is_transactional, control_type`` and ``coordinator_epoch``, in log order. Batches that
        end below ``last_offset`` are already reflected and skipped, so the scan may start at
        the segment holding the snapshot point. ``on_completed`` hears of every transaction a
        replayed marker ends. Returns the number of batches replayed."""
        replayed = 0
        for fields in headers:
            (
                producer_id,
                producer_epoch,
                base_sequence,
                records_count,
                base_offset,
                last_offset_delta,
                max_timestamp,
                is_control,
            ) = fields[:8]
            is_transactional, control_type = fields[8:10] if len(fields) >= 10 else (False, None)
            coordinator_epoch = fields[10] if len(fields) == 11 else -1
            last_offset = base_offset + last_offset_delta
            if last_offset < self._last_offset:
                continue
            if base_offset < self._last_offset and (producer_id < 0 or records_count == 0):
                # An empty span the log cleaner merged after the snapshot was taken (it starts
                # below the snapshot point): nothing in it changes producer state.
                self._last_offset = last_offset + 1
                replayed += 1
                continue
            completed = self.record_batch_header(
                producer_id,
                producer_epoch,
                base_sequence,
                records_count,
                base_offset,
                last_offset_delta,
                max_timestamp,
                is_control=is_control,
                is_transactional=is_transactional,
                control_type=control_type,
                coordinator_epoch=coordinator_epoch,
            )
            if completed is not None and on_completed is not None:
                on_completed(completed)
            replayed += 1
        return replayed

    def _check_batch_position(self, first_offset: int, last_offset: int) -> None:
        if first_offset < self._last_offset or last_offset < first_offset:
            raise ProducerStateError(
                f"batch [{first_offset}, {last_offset}] does not lie at or after the "
                f"producer state's end offset {self._last_offset}"
            )

    # -- log truncation and expiry ---------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """The log was truncated to end at ``offset``: forget batches ending at or after it
        and producers left with none."""
        if offset >= self._last_offset:
            return
        for producer_id in list(self._producers):
            entry = self._producers[producer_id]
            while entry.batches and entry.batches[-1].last_offset >= offset:
                entry.batches.pop()
            if entry.marker_offset >= offset:
                entry.marker_offset = -1  # the marker that raised its epoch is gone
            if entry.batches:
                entry.last_timestamp_ms = entry.batches[-1].timestamp_ms
                entry._check_invariants()
            elif entry.marker_offset < 0:
                del self._producers[producer_id]
        # Transactions that began in the removed tail are gone; those whose marker was removed
        # are open again.
        self._ongoing = {pid: first for pid, first in self._ongoing.items() if first < offset}
        while self._completed and self._completed[-1].last_offset >= offset:
            completed = self._completed.pop()
            if completed.first_offset < offset:
                self._ongoing[completed.producer_id] = completed.first_offset
        self._last_offset = max(offset, 0)

    def truncate_before(self, offset: int) -> None:
        """The log start moved to ``offset``: forget batches wholly before it, but keep each
        producer's newest batch (its epoch and last sequence), like Kafka 3.x."""
        for entry in self._producers.values():
            while len(entry.batches) > 1 and entry.batches[0].last_offset < offset:
                entry.batches.popleft()
            entry._check_invariants()
        # An open transaction that began below the new start now begins there (the log never
        # moves its start past an open transaction's first offset: ``first_unstable_offset``).
        self._ongoing = {pid: max(first, offset) for pid, first in self._ongoing.items()}
        # Like Kafka's onLogStartOffsetIncremented: nothing below the log start is replayed.
        self._last_offset = max(self._last_offset, offset)

    def expire(self, now_ms: int) -> int:
        """Drop producers whose last batch is at least ``expiration_ms`` old (by the batch's
        max timestamp, as Kafka does). Returns how many were dropped."""
        expired = [
            producer_id
            for producer_id, entry in self._producers.items()
            if now_ms - entry.last_timestamp_ms >= self._expiration_ms
        ]
        for producer_id in expired:
            del self._producers[producer_id]
        return len(expired)

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able copy of the state, valid up to ``last_offset`` (exclusive)."""
        return {
            "version": SNAPSHOT_VERSION,
            "last_offset": self._last_offset,
            "producers": [
                {
                    "producer_id": entry.producer_id,
                    "producer_epoch": entry.producer_epoch,
                    "last_timestamp_ms": entry.last_timestamp_ms,
                    "batches": [
                        [b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms]
                        for b in entry.batches
                    ],
                    **({"marker_offset": entry.marker_offset} if entry.marker_offset >= 0 else {}),
                    **(
                        {"coordinator_epoch": entry.coordinator_epoch}
                        if entry.coordinator_epoch >= 0
                        else {}
                    ),
                }
                for entry in self._producers.values()  # least recently recorded first
            ],
            "ongoing": [[pid, first] for pid, first in self._ongoing.items()],
            "completed": [
                [c.producer_id, c.first_offset, c.last_offset, c.is_aborted]
                for c in self._completed
            ],
        }

    @classmethod
    def from_snapshot(
        cls,
        data: Mapping[str, Any],
        *,
        max_producers: int = DEFAULT_MAX_PRODUCERS,
        expiration_ms: int = DEFAULT_PRODUCER_EXPIRATION_MS,
        strict_new_producers: bool = False,
    ) -> ProducerStateManager:
        """Load a ``snapshot()``; raises ``ProducerSnapshotError`` if it is not valid. Expired
        producers are not dropped here (no clock): call ``expire`` after loading."""
        try:
            return cls._load(
                data,
                max_producers=max_producers,
                expiration_ms=expiration_ms,
                strict_new_producers=strict_new_producers,
            )
        except (KeyError, TypeError, ValueError, AssertionError, ProducerStateError) as error:
            if isinstance(error, ProducerSnapshotError):
                raise
            raise ProducerSnapshotError(f"invalid producer state snapshot: {error!r}") from error

    @classmethod
    def _load(
        cls,
        data: Mapping[str, Any],
        *,
        max_producers: int,
        expiration_ms: int,
        strict_new_producers: bool,
    ) -> ProducerStateManager:
        if data["version"] != SNAPSHOT_VERSION:
            raise ProducerSnapshotError(f"unknown snapshot version {data['version']!r}")
        last_offset = _int(data["last_offset"])
        manager = cls(
            max_producers=max_producers,
            expiration_ms=expiration_ms,
            strict_new_producers=strict_new_producers,
            last_offset=last_offset,
        )
        for item in data["producers"]:
            entry = _entry_from_json(item)
            if entry.producer_id in manager._producers:
                raise ProducerSnapshotError(f"producer {entry.producer_id} listed twice")
            if max(entry.last_data_offset if entry.batches else -1, entry.marker_offset) >= (
                last_offset
            ):
                raise ProducerSnapshotError(
                    f"producer {entry.producer_id} has a batch at or after {last_offset}"
                )
            manager._producers[entry.producer_id] = entry
        for producer_id, first in data.get("ongoing", []):
            if not 0 <= _int(first) < last_offset or _int(producer_id) < 0:
                raise ProducerSnapshotError(f"open transaction {producer_id} at {first}")
            manager._ongoing[producer_id] = first
        for producer_id, first, last, aborted in data.get("completed", []):
            if not 0 <= _int(first) <= _int(last) < last_offset or type(aborted) is not bool:
                raise ProducerSnapshotError(f"completed transaction {producer_id} at {first}")
            manager._completed.append(CompletedTxn(_int(producer_id), first, last, aborted))
        while len(manager._producers) > max_producers:
            manager._producers.popitem(last=False)
        return manager


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an int, got {value!r}")
    return value


def _entry_from_json(item: Mapping[str, Any]) -> ProducerEntry:
    entry = ProducerEntry(
        producer_id=_int(item["producer_id"]),
        producer_epoch=_int(item["producer_epoch"]),
        last_timestamp_ms=_int(item["last_timestamp_ms"]),
    )
    if entry.producer_id < 0:
        raise ValueError(f"producer id {entry.producer_id}")
    entry.marker_offset = _int(item.get("marker_offset", -1))
    entry.coordinator_epoch = _int(item.get("coordinator_epoch", -1))
    batches = item["batches"]
    if not (1 if entry.marker_offset < 0 else 0) <= len(batches) <= NUM_BATCHES_TO_RETAIN:
        raise ValueError(f"producer {entry.producer_id} has {len(batches)} batches")
    for fields in batches:
        first_seq, last_seq, first_offset, last_offset, timestamp_ms = (_int(f) for f in fields)
        if not (0 <= first_seq <= MAX_SEQUENCE and 0 <= last_seq <= MAX_SEQUENCE):
            raise ValueError(f"producer {entry.producer_id}: sequence out of range")
        if not 0 <= first_offset <= last_offset:
            raise ValueError(
                f"producer {entry.producer_id}: offsets [{first_offset}, {last_offset}]"
            )
        entry.batches.append(
            BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp_ms)
        )
    entry._check_invariants()
    return entry
