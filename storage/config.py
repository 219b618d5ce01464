"""Per-log configuration (the storage half of a Kafka topic config)."""

from __future__ import annotations

from dataclasses import dataclass

from flux.storage.limits import MAX_SEGMENT_BYTES

__all__ = ["LogConfig"]

_WEEK_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class LogConfig:
    """How one partition log rolls, retains and flushes.

    Field names follow the Kafka topic configs they mirror (``segment.bytes``,
    ``segment.ms``, ``retention.ms``, ``retention.bytes``,
    ``flush.messages``, ``flush.ms``, ``index.interval.bytes``,
    ``message.timestamp.type=LogAppendTime``).
    """

    # Roll when the active segment is non-empty and would exceed this size.
    segment_bytes: int = 1 << 30
    # Roll when the active segment's first append is older than this.
    segment_ms: int = _WEEK_MS
    # -1 = unlimited. A segment is deletable when its largest maxTimestamp
    # is older than now - retention_ms.
    retention_ms: int = _WEEK_MS
    # -1 = unlimited. Delete oldest segments while
    # total size - oldest segment size >= retention_bytes.
    retention_bytes: int = -1
    # fsync after this many records appended since the last flush (None = never by count).
    flush_messages: int | None = None
    # fsync when the last flush is older than this (None = never by time).
    flush_ms: int | None = None
    # One sparse offset/time index entry per this many bytes of batches.
    index_interval_bytes: int = 4096
    # Timestamp type LogAppendTime: append() stamps maxTimestamp with the broker clock.
    log_append_time: bool = False
    # cleanup.policy: ``delete`` (retention by age and size deletes old segments) and/or
    # ``compact`` (the log cleaner keeps the newest record per key; see storage/compaction).
    # With compact alone, retention_ms/retention_bytes delete nothing.
    cleanup_delete: bool = True
    cleanup_compact: bool = False
    # Compaction knobs (Kafka's names): tombstones stay readable this long after the clean that
    # first kept them; a log is cleaned once this share of its cleanable bytes is dirty; records
    # younger than min_compaction_lag_ms are never compacted, older than max_compaction_lag_ms
    # are compacted whatever the dirty ratio (and the active segment rolls at that age).
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1

    @property
    def roll_ms(self) -> int:
        """How old the active segment may get: segment_ms, or max_compaction_lag_ms if smaller
        on a compacted log (a record in the active segment cannot be compacted)."""
        if self.cleanup_compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    def __post_init__(self) -> None:
        if not 1 <= self.segment_bytes <= MAX_SEGMENT_BYTES:
            raise ValueError(
                f"segment_bytes must be in [1, {MAX_SEGMENT_BYTES}], got {self.segment_bytes}"
            )
        if self.segment_ms < 1:
            raise ValueError(f"segment_ms must be >= 1, got {self.segment_ms}")
        if self.retention_ms < -1:
            raise ValueError(f"retention_ms must be >= -1, got {self.retention_ms}")
        if self.retention_bytes < -1:
            raise ValueError(f"retention_bytes must be >= -1, got {self.retention_bytes}")
        if self.flush_messages is not None and self.flush_messages < 1:
            raise ValueError(f"flush_messages must be None or >= 1, got {self.flush_messages}")
        if self.flush_ms is not None and self.flush_ms < 0:
            raise ValueError(f"flush_ms must be None or >= 0, got {self.flush_ms}")
        if not (self.cleanup_delete or self.cleanup_compact):
            raise ValueError("cleanup policy must include delete, compact or both")
        if self.delete_retention_ms < 0:
            raise ValueError(f"delete_retention_ms must be >= 0, got {self.delete_retention_ms}")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError(
                f"min_cleanable_dirty_ratio must be in [0, 1], got {self.min_cleanable_dirty_ratio}"
            )
        if not 0 <= self.min_compaction_lag_ms <= self.max_compaction_lag_ms:
            raise ValueError(
                "need 0 <= min_compaction_lag_ms <= max_compaction_lag_ms, got "
                f"{self.min_compaction_lag_ms} and {self.max_compaction_lag_ms}"
            )
        if self.index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must be >= 0, got {self.index_interval_bytes}")
