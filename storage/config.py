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
        if self.index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must be >= 0, got {self.index_interval_bytes}")
