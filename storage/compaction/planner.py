"""Pure rules of compaction: what part of a log may be cleaned, whether it is worth it, the
bounded key map, and which records survive. No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from hashlib import blake2b
from pathlib import Path
from typing import Any, Protocol

from flux.storage.config import LogConfig

__all__ = [
    "CleanPlan",
    "DedupeMap",
    "KeyedRecord",
    "LogView",
    "RecordCodec",
    "SegmentView",
    "plan_clean",
    "surviving",
]

#: (offset, key or None, value is null, start, end of the record's bytes in the batch's
#: decompressed records).
KeyedRecord = tuple[int, bytes | None, bool, int, int]


class RecordCodec(Protocol):
    """Decodes just enough of a batch for compaction (``flux.protocol.records`` provides it)."""

    def record_keys(self, batch: bytes) -> tuple[Any, bytes, list[KeyedRecord]]:
        """(header, decompressed record bytes, each record)."""
        ...

    def filter_batch(
        self, batch: bytes, header: Any, data: bytes, kept: Sequence[KeyedRecord]
    ) -> bytes:
        """The batch with only ``kept`` records, its span, producer fields and codec kept."""
        ...


@dataclass(frozen=True)
class SegmentView:
    """A closed segment as the cleaner sees it (taken on the log's owner thread)."""

    base_offset: int
    next_offset: int
    size_bytes: int
    log_path: Path
    #: Largest record timestamp (or last write), for min.compaction.lag.ms.
    largest_timestamp_ms: int
    #: The first batch's timestamp (or first write), for max.compaction.lag.ms.
    first_timestamp_ms: int
    #: The file's mtime: when a cleaned segment was cleaned (see ``LogCleaner``).
    modified_ms: int
    #: The log's segment object: ``commit`` checks it is still there.
    token: Any


@dataclass(frozen=True)
class LogView:
    """What one clean needs of a log, taken on its owner thread."""

    directory: Path
    config: LogConfig
    log_start_offset: int
    #: Closed segments, oldest first (the active segment is never cleaned).
    segments: tuple[SegmentView, ...]
    active_base_offset: int
    #: Offsets below this were cleaned at least once (the cleaner checkpoint).
    cleaned_through: int
    #: ``(producer id, first offset, abort marker offset)`` of the aborted transactions the
    #: log holds (its aborted-transaction index): their batches are removed, not compacted.
    aborted_txns: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class CleanPlan:
    """Segments ``cleanable`` (wholly below ``first_uncleanable``) of which those ending after
    ``first_dirty`` have not been cleaned yet."""

    cleanable: tuple[SegmentView, ...]
    first_dirty: int
    first_uncleanable: int
    dirty_bytes: int
    clean_bytes: int
    forced: bool

    @property
    def dirty_ratio(self) -> float:
        total = self.dirty_bytes + self.clean_bytes
        return self.dirty_bytes / total if total else 0.0


def first_uncleanable_offset(view: LogView, high_watermark: int, now_ms: int) -> int:
    """Nothing at or above this is cleaned: the active segment, what is not committed (a
    follower may still truncate it; the broker passes the last stable offset, so no open
    transaction is cleaned either), and records younger than min.compaction.lag.ms."""
    limit = min(view.active_base_offset, high_watermark)
    lag = view.config.min_compaction_lag_ms
    if lag > 0:
        for segment in view.segments:
            if segment.largest_timestamp_ms > now_ms - lag:
                return min(limit, segment.base_offset)
    return limit


def dirty_ratio(view: LogView, high_watermark: int, now_ms: int) -> float:
    """The share of the cleanable bytes not cleaned yet (0 when nothing is cleanable)."""
    plan = _plan(view, high_watermark, now_ms)
    return plan.dirty_ratio if plan is not None else 0.0


def _plan(view: LogView, high_watermark: int, now_ms: int) -> CleanPlan | None:
    limit = first_uncleanable_offset(view, high_watermark, now_ms)
    cleanable = tuple(
        segment
        for segment in view.segments
        if segment.next_offset <= limit and segment.next_offset > view.log_start_offset
    )
    if not cleanable:
        return None
    first_dirty = max(view.cleaned_through, cleanable[0].base_offset)
    dirty = [segment for segment in cleanable if segment.next_offset > first_dirty]
    if not dirty:
        return None
    dirty_bytes = sum(segment.size_bytes for segment in dirty)
    clean_bytes = sum(segment.size_bytes for segment in cleanable) - dirty_bytes
    max_lag = view.config.max_compaction_lag_ms
    forced = dirty[0].first_timestamp_ms < now_ms - max_lag if max_lag < 2**62 else False
    return CleanPlan(cleanable, first_dirty, limit, dirty_bytes, clean_bytes, forced)


def plan_clean(view: LogView, high_watermark: int, now_ms: int) -> CleanPlan | None:
    """The clean this log needs now, or None: compaction off, nothing cleanable, or a dirty
    share below min.cleanable.dirty.ratio with nothing older than max.compaction.lag.ms."""
    if not view.config.cleanup_compact:
        return None
    plan = _plan(view, high_watermark, now_ms)
    if plan is None:
        return None
    if plan.forced or plan.dirty_ratio >= view.config.min_cleanable_dirty_ratio:
        return plan
    return None


class DedupeMap:
    """The newest offset of each key seen, bounded to about ``memory_bytes`` (Kafka's
    ``log.cleaner.dedupe.buffer.size``). A key longer than 32 bytes is stored as a 16-byte
    BLAKE2b digest (Kafka uses MD5 for all). ``ENTRY_BYTES`` is what one entry costs in
    CPython (dict slot, bytes and int objects), measured for short keys."""

    ENTRY_BYTES = 120

    def __init__(self, memory_bytes: int) -> None:
        self.capacity = max(1, memory_bytes // self.ENTRY_BYTES)
        self._offsets: dict[bytes, int] = {}

    @staticmethod
    def _slot(key: bytes) -> bytes:
        return key if len(key) <= 32 else b"#" + blake2b(key, digest_size=16).digest()

    def __len__(self) -> int:
        return len(self._offsets)

    def has_room(self, count: int) -> bool:
        """Whether ``count`` more keys surely fit."""
        return len(self._offsets) + count <= self.capacity

    def put_all(self, records: Sequence[KeyedRecord]) -> None:
        """``put`` of every keyed record of a batch (the map pass's inner loop, inlined)."""
        offsets = self._offsets
        for record in records:
            key = record[1]
            if key is not None:
                offsets[key if len(key) <= 32 else self._slot(key)] = record[0]


def surviving(
    records: Sequence[KeyedRecord], dedupe: DedupeMap, *, drop_tombstones: bool
) -> list[KeyedRecord]:
    """The records of one batch a clean keeps: every record whose key has no newer record
    in the map, except tombstones once ``drop_tombstones``. Records without a key are kept
    (a compacted topic refuses them at produce; ones written before the topic became
    compacted are never lost by a clean)."""
    kept = []
    offsets = dedupe._offsets
    slot = dedupe._slot
    for record in records:
        key = record[1]
        if key is not None:
            latest = offsets.get(key if len(key) <= 32 else slot(key))
            if latest is not None and latest > record[0]:
                continue
            if record[2] and drop_tombstones:
                continue
        kept.append(record)
    return kept
