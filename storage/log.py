"""Partition logs: ``PartitionLog`` on disk and ``MemoryLog`` in RAM, one interface.

Like Kafka's ``UnifiedLog`` over ``LogSegment``s: the log owns roll,
retention, truncation, flush and (on disk) recovery; segments own bytes and
sparse indexes. Neither class is thread-safe: a log has a single owner (the
broker calls it from its one asyncio thread).

Disk faults: the first OSError of an append, roll, read, truncation, retention
pass, flush or clean install (ENOSPC, EIO, EROFS...) *fails* the log: it raises
``LogDirectoryError`` (path and errno), calls ``on_failure`` once, and from then
on every such call raises the same error; ``close`` then releases the files
without a flush or the clean-shutdown marker, so the next ``open`` recovers the
log by CRC. A partial write is truncated before the error is raised.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from crc32c import crc32c
from flux.storage._segment import (
    SEGMENT_FILE,
    BatchMeta,
    _DiskSegment,
    _MemorySegment,
    _Segment,
    fsync_directory,
)
from flux.storage.batch import (
    ATTRIBUTES,
    ATTRIBUTES_AT,
    BASE_OFFSET,
    CRC,
    CRC_AT,
    CRC_START,
    HEADER,
    LEADER_EPOCH,
    LEADER_EPOCH_AT,
    MAX_TIMESTAMP,
    MAX_TIMESTAMP_AT,
    TIMESTAMP_TYPE_LOG_APPEND,
    AppendResult,
    BatchInfo,
    Header,
    ParsedBatch,
    parse_batches,
)
from flux.storage.compaction.cleaner import CleanedGroup, CleanResult
from flux.storage.compaction.planner import LogView, SegmentView
from flux.storage.compaction.swap import CLEANING_DIRECTORY, SWAP_SUFFIX, complete_swaps
from flux.storage.config import LogConfig
from flux.storage.errors import (
    LogClosedError,
    LogDirectoryError,
    OffsetMismatchError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    StorageError,
)
from flux.storage.limits import (
    MAX_APPEND_BYTES,
    MAX_RELATIVE_OFFSET,
    TAIL_CACHE_APPENDS,
    TAIL_CACHE_BYTES,
)
from flux.storage.txn_index import INDEX_FILE as TXN_INDEX_FILE
from flux.storage.txn_index import AbortedTxnIndex

__all__ = ["PartitionLog", "MemoryLog", "Log"]

logger = logging.getLogger("flux.storage")

LOG_START_OFFSET_FILE = "log-start-offset.checkpoint"
#: Offsets below the one in this file have been through the log cleaner at least once.
CLEANER_CHECKPOINT_FILE = "cleaner-offset.checkpoint"
CLEAN_SHUTDOWN_FILE = "clean-shutdown"
_CHECKPOINT_VERSION = 0
_STRAY_SUFFIXES = (".tmp", ".deleted", ".swap", ".cleaned")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _ignore_failure(failure: LogDirectoryError) -> None:
    """The default ``on_failure``: nobody is told (the caller still gets the error)."""


_P = ParamSpec("_P")
_R = TypeVar("_R")
_L = TypeVar("_L", bound="_SegmentedLog")


def _io_guarded(method: Callable[Concatenate[_L, _P], _R]) -> Callable[Concatenate[_L, _P], _R]:
    """Turn an OSError raised by ``method`` (ENOSPC, EIO, EROFS...) into the log's failure, a
    ``LogDirectoryError``; once failed, the log refuses every guarded call with that error
    (Kafka takes a log directory offline on its first IOException: after a failed write or
    fsync nobody can say which bytes reached the disk)."""

    @functools.wraps(method)
    def guarded(self: _L, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if self._failure is not None:
            raise LogDirectoryError(self._failure.path, self._failure.cause)
        try:
            return method(self, *args, **kwargs)
        except LogDirectoryError:
            raise  # a nested guarded call failed the log already
        except OSError as error:
            raise self._fail(error) from error

    return guarded


class _SegmentedLog:
    """The log logic shared by the disk and the memory log.

    Invariants: there is always at least one segment; the last one is the
    active segment (the only one appended to); segments are contiguous
    (each base offset is the previous segment's next offset);
    log_start_offset <= log_end_offset; log_start_offset lies in the first
    segment (or equals log_end_offset); recovery_point <= log_end_offset.
    Not thread-safe.
    """

    def __init__(
        self,
        config: LogConfig,
        clock_ms: Callable[[], int],
        segments: list[_Segment],
        log_start_offset: int,
        recovery_point: int,
    ) -> None:
        assert segments, "a log always has an active segment"
        self._config = config
        self._clock_ms = clock_ms
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._closed = False
        self._unflushed_records = 0
        self._last_flush_ms = clock_ms()
        # The latest appends as (base offset, next offset, bytes, their batches), oldest first:
        # see _read_tail.
        # Whatever removes or rewrites stored batches calls _forget_tail.
        self._tail: deque[tuple[int, int, bytes, list[BatchMeta]]] = deque()
        self._tail_bytes = 0
        #: The aborted transactions of this log (``storage.txn_index``): truncated with the
        #: log, its entries below the log start dropped when the log start moves.
        self.txn_index = AbortedTxnIndex()
        #: The I/O error that failed this log (see ``_io_guarded``), None while it is healthy.
        self._failure: LogDirectoryError | None = None
        #: Called once, with the failure, when an I/O error fails this log (the broker takes
        #: the whole log directory offline).
        self.on_failure: Callable[[LogDirectoryError], None] = _ignore_failure
        self._check_invariants()

    #: Bytes of recent appends kept in memory (0: none; the memory log reads RAM anyway).
    _tail_cache_bytes = TAIL_CACHE_BYTES

    # -- hooks for the storage flavour -------------------------------------

    def _create_segment(self, base_offset: int) -> _Segment:
        raise NotImplementedError

    def _persist_log_start_offset(self) -> None:
        """Make log_start_offset survive a restart (disk only)."""

    def _sync_directory(self) -> None:
        """Make file creations and deletions durable (disk only)."""

    def _after_truncate(self) -> None:
        """Make a truncation durable (disk only)."""

    # -- properties ---------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """Adopt a new config; it applies from the next append, roll or retention pass."""
        self._config = config
        for segment in self._segments:
            segment.index_interval_bytes = config.index_interval_bytes

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        """Every offset below it is fsynced."""
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def failure(self) -> LogDirectoryError | None:
        """The I/O error that failed this log, or None (see ``LogDirectoryError``)."""
        return self._failure

    def _failure_path(self) -> Path:
        return Path("<memory>")

    def _fail(self, error: OSError) -> LogDirectoryError:
        """Record the first I/O error as this log's failure and tell ``on_failure``; the error
        to raise (a later one, e.g. while closing a failed log, is only wrapped)."""
        failure = LogDirectoryError(self._failure_path(), error)
        if self._failure is None:
            self.fail(failure)
            logger.error("%s: %s; the log takes no more reads or writes", self, failure)
            self.on_failure(failure)
        return failure

    def fail(self, failure: LogDirectoryError) -> None:
        """Fail this log because its directory failed elsewhere (another log, the node-local
        store): like its own I/O error, without telling ``on_failure``. Idempotent."""
        if self._failure is None:
            self._failure = failure
            self._forget_tail()
            self._release_descriptors()

    def _release_descriptors(self) -> None:
        """A failed log reads and writes nothing more, so its files are closed at once, not at
        ``close``: a directory that failed because the process ran out of descriptors
        (``EMFILE``) gets them back, and the node can still accept connections (``/health``,
        Metadata, heartbeats). The log stays failed, not closed: every use raises its failure."""
        for segment in self._segments:
            segment.close()
        self.txn_index.close()

    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    # -- append -------------------------------------------------------------------

    @_io_guarded
    def append(
        self,
        batches: bytes | bytearray | memoryview,
        *,
        leader_epoch: int | None = None,
        assign_offsets: bool = True,
    ) -> AppendResult:
        """Append one or more concatenated v2 batches, all or nothing.

        Every batch is validated before anything is written (CorruptBatchError).
        With ``assign_offsets`` (the leader path) a copy gets consecutive base
        offsets from log_end_offset, ``leader_epoch`` if given, and with
        ``config.log_append_time`` the broker's clock as maxTimestamp (CRC re-sealed).
        Without it (the follower path) the bytes are stored as they are; their
        offsets must continue the log exactly (OffsetMismatchError).
        """
        self._check_open()
        view = memoryview(batches)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        if len(view) > MAX_APPEND_BYTES:
            raise RecordBatchTooLargeError(
                f"append of {len(view)} bytes exceeds the limit of {MAX_APPEND_BYTES}"
            )
        parsed = parse_batches(view)
        now_ms = self._clock_ms()
        first_offset = self.log_end_offset
        stamp_ms = now_ms if self._config.log_append_time and assign_offsets else -1
        data: bytearray | memoryview
        if assign_offsets:
            data = bytearray(view)  # the one copy: offsets (and maybe timestamps) are rewritten
            metas = _assign_offsets(data, parsed, first_offset, leader_epoch, stamp_ms)
        else:
            data = view
            metas = _follower_metas(parsed, first_offset)
        last_offset = metas[-1][3]
        self._maybe_roll(len(data), last_offset, now_ms)
        final_header = Header._make(HEADER.unpack_from(data, parsed[-1].position))
        self._segments[-1].append(data, metas, final_header, now_ms)
        if self._tail_cache_bytes:
            self._remember_tail(metas, data)
        record_count = sum(batch.header.records_count for batch in parsed)
        self._unflushed_records += record_count
        self._apply_flush_policy(now_ms)
        return AppendResult(
            base_offset=first_offset,
            last_offset=last_offset,
            batch_count=len(parsed),
            record_count=record_count,
            max_timestamp=max(meta[4] for meta in metas),
            log_append_time_ms=stamp_ms,
        )

    def _remember_tail(self, metas: list[BatchMeta], data: bytes | bytearray | memoryview) -> None:
        tail = self._tail
        if len(data) > self._tail_cache_bytes:
            tail.clear()
            self._tail_bytes = 0
            return
        tail.append((metas[0][2], metas[-1][3] + 1, bytes(data), metas))
        self._tail_bytes += len(data)
        while self._tail_bytes > self._tail_cache_bytes or len(tail) > TAIL_CACHE_APPENDS:
            self._tail_bytes -= len(tail.popleft()[2])

    def _forget_tail(self) -> None:
        self._tail.clear()
        self._tail_bytes = 0

    def _read_tail(self, offset: int, max_bytes: int, limit: int) -> bytes | None:
        """``read`` answered from the latest appends held in memory (the same bytes, by the
        same rules as the segments), or None when ``offset`` lies before them."""
        tail = self._tail
        if not tail or offset < tail[0][0] or offset >= tail[-1][1]:
            return None
        first = len(tail) - 1
        while tail[first][0] > offset:  # newest first: a follower asks for the latest append
            first -= 1
        parts: list[bytes] = []
        total = 0
        for index in range(first, len(tail)):
            data, metas = tail[index][2], tail[index][3]
            for position, size, _base_offset, last_offset, _max_timestamp in metas:
                if last_offset < offset:
                    continue
                if last_offset >= limit or (parts and total + size > max_bytes):
                    return b"".join(parts)
                parts.append(data if size == len(data) else data[position : position + size])
                total += size
                if total > max_bytes:
                    return parts[0]  # the first batch, whole although larger than max_bytes
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _maybe_roll(self, incoming_bytes: int, last_offset: int, now_ms: int) -> None:
        active = self._segments[-1]
        if active.size_bytes == 0:
            if last_offset - active.base_offset > MAX_RELATIVE_OFFSET:
                raise RecordBatchTooLargeError(
                    f"one append spans {last_offset - active.base_offset + 1} offsets, "
                    f"more than a segment can index"
                )
            return
        if active.size_bytes + incoming_bytes > self._config.segment_bytes:
            reason = "segment_bytes"
        elif now_ms - active.roll_base(now_ms) > self._config.roll_ms:
            reason = "segment_ms"
        elif last_offset - active.base_offset > MAX_RELATIVE_OFFSET:
            reason = "relative offset overflow"
        else:
            return
        self._roll(reason)

    def _roll(self, reason: str) -> None:
        active = self._segments[-1]
        active.seal_time_index()
        segment = self._create_segment(active.next_offset)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        logger.debug("%s: rolled segment %d (%s)", self, segment.base_offset, reason)

    @_io_guarded
    def roll(self) -> bool:
        """Start a new active segment now if the current one is non-empty; returns whether it rolled."""
        self._check_open()
        if self._segments[-1].size_bytes == 0:
            return False
        self._roll("requested")
        return True

    # -- read ---------------------------------------------------------------------

    @_io_guarded
    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> bytes:
        """Whole batches from the one containing ``offset``, concatenated.

        Stops before exceeding ``max_bytes`` but always returns the first
        qualifying batch whole. Only batches whose last offset is below
        ``max_offset`` (exclusive, e.g. the high watermark) qualify. Returns
        b"" at log_end_offset; OffsetOutOfRangeError outside
        [log_start_offset, log_end_offset].
        """
        self._check_open()
        end = self.log_end_offset
        if offset < self._log_start_offset or offset > end:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, end)
        limit = end if max_offset is None else min(max_offset, end)
        if offset >= limit:
            return b""
        cached = self._read_tail(offset, max_bytes, limit)
        if cached is not None:
            return cached
        parts: list[bytes] = []
        budget = max_bytes
        i = self._segment_index(offset)
        while i < len(self._segments):
            segment = self._segments[i]
            data, exhausted = segment.read(offset, budget, limit, first=not parts)
            if data:
                parts.append(data)
                budget -= len(data)
            offset = segment.next_offset
            if not exhausted or offset >= limit or budget <= 0:
                break
            i += 1
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)

    def _segment_index(self, offset: int) -> int:
        return max(bisect_right(self._bases, offset) - 1, 0)

    def largest_timestamp(self) -> int:
        """The largest batch timestamp of the segments holding records at or above
        log_start_offset (-1: none); a segment that DeleteRecords cut into still counts its
        records below the start (``offset_for_timestamp`` then finds none of them)."""
        self._check_open()
        return max(
            (
                segment.max_timestamp
                for segment in self._segments
                if segment.next_offset > self._log_start_offset
            ),
            default=-1,
        )

    @_io_guarded
    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, bytes] | None:
        """The first batch (at or above log_start_offset) with maxTimestamp >= timestamp_ms:
        (its base offset, its bytes), so the caller can find the exact record; None if none."""
        self._check_open()
        for segment in self._segments:
            if (
                segment.max_timestamp < timestamp_ms
                or segment.next_offset <= self._log_start_offset
            ):
                continue
            found = segment.find_by_timestamp(timestamp_ms, self._log_start_offset)
            if found is not None:
                return found
        return None

    def batch_infos(self, start_offset: int | None = None) -> Iterator[BatchInfo]:
        """Headers of stored batches from the one containing ``start_offset`` (default:
        log_start_offset) to the end. Do not modify the log while iterating."""
        self._check_open()
        if self._failure is not None:  # its files are closed
            raise LogDirectoryError(self._failure.path, self._failure.cause)
        offset = self._log_start_offset if start_offset is None else start_offset
        for segment in self._segments[self._segment_index(offset) :]:
            yield from segment.batch_infos(offset)

    @_io_guarded
    def last_batch_info(self) -> BatchInfo | None:
        """The header of the last stored batch, or None if the log holds none."""
        self._check_open()
        for segment in reversed(self._segments):
            info = segment.last_batch()
            if info is not None:
                return info
        return None

    # -- truncation and deletion --------------------------------------------------

    @_io_guarded
    def truncate_to(self, offset: int) -> None:
        """Remove every batch whose base offset is >= ``offset``.

        Batch granularity: if ``offset`` falls inside a batch, that whole batch
        goes too and log_end_offset becomes its base offset (so it is
        ``offset`` exactly when ``offset`` is a batch boundary). A no-op when
        offset >= log_end_offset; OffsetOutOfRangeError below log_start_offset.
        If the cut lands below log_start_offset (the batch straddles it) the
        log is emptied and restarts at log_start_offset.
        """
        self._check_open()
        end = self.log_end_offset
        if offset >= end:
            return
        if offset < self._log_start_offset:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, end)
        self._forget_tail()
        i = self._segment_index(offset)
        segment = self._segments[i]
        position, header = segment.find_batch(offset)
        boundary = header.base_offset
        if boundary < self._log_start_offset:
            self.truncate_fully_and_start_at(self._log_start_offset)
            return
        self._drop_tail(i + 1)
        segment.truncate_at(position, boundary)
        self.txn_index.truncate_to(boundary)
        self._recovery_point = min(self._recovery_point, boundary)
        self._after_truncate()
        logger.info("%s: truncated to offset %d", self, boundary)
        self._check_invariants()

    @_io_guarded
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the empty log at ``offset`` (a follower
        whose log no longer overlaps its leader's). Moves log_start_offset to ``offset``."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._forget_tail()
        self._drop_tail(0)
        segment = self._create_segment(offset)
        self._segments.append(segment)
        self._bases.append(offset)
        self._log_start_offset = offset
        self._persist_log_start_offset()
        self.txn_index.truncate_to(0)
        self._recovery_point = offset
        self._after_truncate()
        logger.info("%s: truncated fully, restarting at offset %d", self, offset)
        self._check_invariants()

    @_io_guarded
    def delete_records_before(self, offset: int) -> int:
        """Move log_start_offset up to ``offset`` (never down), persist it, delete the
        segments wholly below it. Returns the new log_start_offset."""
        self._check_open()
        end = self.log_end_offset
        if offset > end or offset < 0:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, end)
        if offset <= self._log_start_offset:
            return self._log_start_offset
        self._log_start_offset = offset
        self._persist_log_start_offset()
        self.txn_index.drop_before(offset)
        deleted = self._delete_prefix(lambda segment: segment.next_offset <= self._log_start_offset)
        if deleted:
            self._sync_directory()
        self._check_invariants()
        return self._log_start_offset

    @_io_guarded
    def enforce_retention(
        self, now_ms: int | None = None, *, high_watermark: int | None = None
    ) -> int:
        """Delete whole segments: below log_start_offset, older than retention_ms (by their
        largest maxTimestamp), then oldest first while the rest still hold retention_bytes.

        The active segment is never deleted by size; if it is entirely expired by age (or
        below log_start_offset) it is rolled first, as Kafka does. With ``high_watermark``
        only segments wholly below it are deleted (Kafka never deletes unreplicated data).
        Moves log_start_offset to the first remaining segment. Returns how many segments
        were deleted.
        """
        self._check_open()
        now_ms = self._clock_ms() if now_ms is None else now_ms
        upper = self.log_end_offset if high_watermark is None else high_watermark
        deleted = self._delete_prefix(
            lambda segment: segment.next_offset <= min(self._log_start_offset, upper)
        )
        retention_ms = self._config.retention_ms if self._config.cleanup_delete else -1
        if retention_ms >= 0:
            cutoff_ms = now_ms - retention_ms
            deleted += self._delete_prefix(
                lambda segment: (
                    segment.largest_timestamp_ms() < cutoff_ms and segment.next_offset <= upper
                )
            )
        retention_bytes = self._config.retention_bytes if self._config.cleanup_delete else -1
        if retention_bytes >= 0:
            total = self.size_bytes
            count = 0
            while (
                count < len(self._segments) - 1
                and total - self._segments[count].size_bytes >= retention_bytes
                and self._segments[count].next_offset <= upper
            ):
                total -= self._segments[count].size_bytes
                count += 1
            self._drop_head(count)
            deleted += count
        if deleted:
            self._sync_directory()
            logger.info(
                "%s: retention deleted %d segment(s); log start offset is %d",
                self,
                deleted,
                self._log_start_offset,
            )
        self._check_invariants()
        return deleted

    def _delete_prefix(self, deletable: Callable[[_Segment], bool]) -> int:
        """Delete the oldest segments while ``deletable``; roll a non-empty deletable active one."""
        count = 0
        while count < len(self._segments) and deletable(self._segments[count]):
            if count == len(self._segments) - 1:
                if self._segments[count].size_bytes == 0:
                    break
                self._roll("the active segment is deletable")
            count += 1
        self._drop_head(count)
        return count

    def _drop_head(self, count: int) -> None:
        if not count:
            return
        assert count < len(self._segments), "never delete the active segment"
        for segment in self._segments[:count]:
            segment.delete_files()
        del self._segments[:count]
        del self._bases[:count]
        self._log_start_offset = max(self._log_start_offset, self._bases[0])
        self.txn_index.drop_before(self._log_start_offset)

    def _drop_tail(self, index: int) -> None:
        # Newest first, so a crash midway leaves a contiguous prefix.
        for segment in reversed(self._segments[index:]):
            segment.delete_files()
        del self._segments[index:]
        del self._bases[index:]

    # -- flush and lifecycle ------------------------------------------------------

    def _apply_flush_policy(self, now_ms: int) -> None:
        flush_messages = self._config.flush_messages
        flush_ms = self._config.flush_ms
        if flush_messages is not None and self._unflushed_records >= flush_messages:
            self.flush()
        elif flush_ms is not None and now_ms - self._last_flush_ms >= flush_ms:
            self.flush()

    @_io_guarded
    def flush(self) -> None:
        """fsync everything written so far; recovery_point becomes log_end_offset."""
        self._check_open()
        # Everything below the recovery point loads its index files without a scan: their
        # last time entry must be the segment's largest timestamp (sealed) when fsynced.
        self._segments[-1].seal_time_index()
        for segment in self._segments:
            if segment.dirty:
                segment.fsync()
        self._sync_directory()
        self._recovery_point = self.log_end_offset
        self._unflushed_records = 0
        self._last_flush_ms = self._clock_ms()

    def flush_pending(self) -> bool:
        """Whether ``maybe_flush`` has work to do now or later: flush_ms is set and something
        is not fsynced yet. A caller that visits only changed logs keeps visiting this one."""
        if self._closed or self._failure is not None or self._config.flush_ms is None:
            return False
        return self._recovery_point != self.log_end_offset or any(s.dirty for s in self._segments)

    @_io_guarded
    def maybe_flush(self) -> bool:
        """Apply flush_ms by time (call it periodically); returns whether it flushed."""
        self._check_open()
        if not self.flush_pending():
            return False
        flush_ms = self._config.flush_ms
        assert flush_ms is not None
        if self._clock_ms() - self._last_flush_ms < flush_ms:
            return False
        self.flush()
        return True

    def close(self) -> None:
        """Flush and release every file; further use raises LogClosedError. Idempotent.

        A failed log (or one whose final flush fails) is released without flushing and without
        the clean-shutdown marker, so the next open recovers it by CRC; ``close`` does not
        raise for that: ``failure`` says what happened."""
        if self._closed:
            return
        if self._failure is None:
            try:
                self._segments[-1].seal_time_index()
                self.flush()
                self._mark_clean_shutdown()
            except LogDirectoryError:
                pass  # failed by the flush: recorded, told, released below
            except OSError as error:
                self._fail(error)
        self._release()

    def _mark_clean_shutdown(self) -> None:
        """Record that every file is complete and consistent (disk only)."""

    def _release(self) -> None:
        for segment in self._segments:
            segment.close()
        self.txn_index.close()
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self} is closed")

    def _check_invariants(self) -> None:
        segments = self._segments
        assert segments, "a log always has an active segment"
        for previous, segment in zip(segments, segments[1:], strict=False):
            assert segment.base_offset == previous.next_offset, (
                f"segment {segment.base_offset} does not follow {previous.base_offset}..{previous.next_offset}"
            )
        assert segments[0].base_offset <= self._log_start_offset <= self.log_end_offset, (
            f"log start {self._log_start_offset} outside [{segments[0].base_offset}, {self.log_end_offset}]"
        )
        assert self._recovery_point <= self.log_end_offset


def _assign_offsets(
    data: bytearray,
    parsed: list[ParsedBatch],
    next_offset: int,
    leader_epoch: int | None,
    stamp_ms: int,
) -> list[BatchMeta]:
    """Rewrite baseOffset (and partitionLeaderEpoch; LogAppendTime when stamp_ms >= 0) in place.

    baseOffset and partitionLeaderEpoch lie outside the CRC; a LogAppendTime
    stamp changes covered bytes, so the CRC is re-sealed.
    """
    metas: list[BatchMeta] = []
    with memoryview(data) as view:
        for batch in parsed:
            header = batch.header
            position = batch.position
            BASE_OFFSET.pack_into(data, position, next_offset)
            if leader_epoch is not None:
                LEADER_EPOCH.pack_into(data, position + LEADER_EPOCH_AT, leader_epoch)
            max_timestamp = header.max_timestamp
            if stamp_ms >= 0:
                ATTRIBUTES.pack_into(
                    data, position + ATTRIBUTES_AT, header.attributes | TIMESTAMP_TYPE_LOG_APPEND
                )
                MAX_TIMESTAMP.pack_into(data, position + MAX_TIMESTAMP_AT, stamp_ms)
                CRC.pack_into(
                    data,
                    position + CRC_AT,
                    crc32c(view[position + CRC_START : position + batch.size]),
                )
                max_timestamp = stamp_ms
            last_offset = next_offset + header.last_offset_delta
            metas.append((position, batch.size, next_offset, last_offset, max_timestamp))
            next_offset = last_offset + 1
    return metas


def _follower_metas(parsed: list[ParsedBatch], expected_offset: int) -> list[BatchMeta]:
    """Offsets of a follower append must continue the log exactly: our logs never have gaps."""
    metas: list[BatchMeta] = []
    for index, batch in enumerate(parsed):
        header = batch.header
        if header.base_offset != expected_offset:
            raise OffsetMismatchError(
                f"batch {index} has baseOffset {header.base_offset} but the log expects {expected_offset}",
                expected_offset=expected_offset,
                actual_offset=header.base_offset,
            )
        last_offset = header.base_offset + header.last_offset_delta
        metas.append(
            (batch.position, batch.size, header.base_offset, last_offset, header.max_timestamp)
        )
        expected_offset = last_offset + 1
    return metas


class MemoryLog(_SegmentedLog):
    """A log kept in RAM with the same interface and semantics as ``PartitionLog``
    (segments, roll, retention by size and age). Nothing survives the process;
    flush() only moves recovery_point. Not thread-safe."""

    def __init__(
        self,
        config: LogConfig | None = None,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        start_offset: int = 0,
    ) -> None:
        config = LogConfig() if config is None else config
        segment = _MemorySegment(start_offset, config.index_interval_bytes)
        super().__init__(config, clock_ms, [segment], start_offset, start_offset)

    @classmethod
    def open(
        cls,
        config: LogConfig | None = None,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        start_offset: int = 0,
    ) -> MemoryLog:
        return cls(config, clock_ms=clock_ms, start_offset=start_offset)

    _tail_cache_bytes = 0  # its segments are in memory already

    def _create_segment(self, base_offset: int) -> _Segment:
        return _MemorySegment(base_offset, self._config.index_interval_bytes)

    def delete(self) -> None:
        """Drop everything; further use raises LogClosedError."""
        self._release()

    def __repr__(self) -> str:
        return f"MemoryLog(start={self._log_start_offset}, end={self.log_end_offset})"


class PartitionLog(_SegmentedLog):
    """A partition replica's log in one directory: ``<20-digit base>.log`` segments with
    ``.index`` and ``.timeindex``, plus ``log-start-offset.checkpoint``.

    Durability: bytes are written with os.write at append and fsynced by the
    flush policy (flush_messages / flush_ms) or flush(); recovery_point is
    the offset below which everything is fsynced, and open() validates
    (CRC32C) every segment from the one containing the recovery point on.
    A clean close() writes a ``clean-shutdown`` marker so the next open can
    skip that scan. Not thread-safe: one owner.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock_ms: Callable[[], int],
        segments: list[_Segment],
        log_start_offset: int,
        recovery_point: int,
    ) -> None:
        self._directory = directory
        self._directory_dirty = False
        self._cleaned_through: int | None = None
        super().__init__(config, clock_ms, segments, log_start_offset, recovery_point)

    @property
    def directory(self) -> Path:
        return self._directory

    def __repr__(self) -> str:
        return f"PartitionLog({str(self._directory)!r})"

    def _failure_path(self) -> Path:
        return self._directory

    @classmethod
    def open(
        cls,
        directory: str | Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        clock_ms: Callable[[], int] = wall_clock_ms,
        new: bool = False,
        segment_fd: int | None = None,
    ) -> PartitionLog:
        """Open (creating if needed) and recover the log in ``directory``.

        Never fails for a corrupt or torn tail: invalid bytes are truncated
        (WARNING on logger ``flux.storage``) and segments after a hole removed.
        ``new``: the caller has just created ``directory`` and nothing else wrote to it, so
        there is nothing to scan, read back or recover (creating a 10,000-partition topic
        opens 10,000 of these on every broker). ``segment_fd`` (with ``new``): its first
        segment file, already created empty by ``create_segment_file`` (the file-system work of
        a new partition can then run off the event loop); the log owns it.
        An I/O error (a full or failing disk) raises ``LogDirectoryError``.
        """
        directory = Path(directory)
        try:
            return cls._open(directory, config, recovery_point, clock_ms, new, segment_fd)
        except LogDirectoryError:
            raise
        except OSError as error:
            failure = LogDirectoryError(directory, error)
            logger.error("%s: cannot open the log: %s", directory, failure)
            raise failure from error

    @classmethod
    def _open(
        cls,
        directory: Path,
        config: LogConfig,
        recovery_point: int,
        clock_ms: Callable[[], int],
        new: bool,
        segment_fd: int | None,
    ) -> PartitionLog:
        if new:
            segment = _DiskSegment.create(
                directory, 0, config.index_interval_bytes, fresh=True, fd=segment_fd
            )
            log = cls(directory, config, clock_ms, [segment], 0, 0)
            log.txn_index = AbortedTxnIndex(directory / TXN_INDEX_FILE)
            log._directory_dirty = True  # the first flush syncs the directory and the files
            return log
        directory.mkdir(parents=True, exist_ok=True)
        complete_swaps(directory)
        clean_marker = directory / CLEAN_SHUTDOWN_FILE
        clean = clean_marker.exists()
        bases = _scan_directory(directory)
        persisted_start = _read_log_start_offset(directory)
        segments = _load_segments(directory, config, bases, recovery_point, clean=clean)
        if not segments:
            segments = [
                _DiskSegment.create(directory, persisted_start or 0, config.index_interval_bytes)
            ]
        end = segments[-1].next_offset
        log_start_offset = min(max(persisted_start or 0, segments[0].base_offset), end)
        log = cls(directory, config, clock_ms, segments, log_start_offset, min(recovery_point, end))
        log.txn_index = AbortedTxnIndex.open(directory / TXN_INDEX_FILE)
        log.txn_index.truncate_to(end)
        log.txn_index.drop_before(log_start_offset)
        if clean:
            clean_marker.unlink()
            log._recovery_point = end
        if bases or clean:
            # fsync what recovery scanned or rewrote (and the marker's removal) before serving.
            log._directory_dirty = True
            try:
                log.flush()
            except LogDirectoryError:
                log._release()
                raise
        else:
            # A new, empty log: there is nothing to protect yet, and creating thousands of
            # partitions must not cost thousands of fsyncs. Its first flush syncs the
            # directory entry and the files.
            log._directory_dirty = True
        return log

    # -- compaction -----------------------------------------------------------------

    @property
    def cleaned_through(self) -> int:
        """Offsets below this have been through the log cleaner (0: never cleaned)."""
        if self._cleaned_through is None:
            path = self._directory / CLEANER_CHECKPOINT_FILE
            try:
                lines = path.read_text().split()
                value = int(lines[1]) if len(lines) == 2 and lines[0] == "0" else 0
            except (FileNotFoundError, ValueError):
                value = 0
            self._cleaned_through = value
        return self._cleaned_through

    @property
    def last_clean_ms(self) -> int:
        """When a clean was last installed (the cleaner checkpoint's mtime), -1 if never."""
        mtime = _mtime_ms(self._directory / CLEANER_CHECKPOINT_FILE)
        return mtime if mtime > 0 else -1

    def cleaner_view(self) -> LogView:
        """What a clean of this log needs, for ``LogCleaner.clean`` on another thread."""
        self._check_open()
        segments = []
        for segment in self._segments[:-1]:
            assert isinstance(segment, _DiskSegment)
            first = segment.roll_base_ms if segment.roll_base_ms is not None else -1
            segments.append(
                SegmentView(
                    base_offset=segment.base_offset,
                    next_offset=segment.next_offset,
                    size_bytes=segment.size_bytes,
                    log_path=segment.log_path,
                    largest_timestamp_ms=segment.largest_timestamp_ms(),
                    first_timestamp_ms=first if first >= 0 else segment.largest_timestamp_ms(),
                    modified_ms=_mtime_ms(segment.log_path),
                    token=segment,
                )
            )
        return LogView(
            directory=self._directory,
            config=self._config,
            log_start_offset=self._log_start_offset,
            segments=tuple(segments),
            active_base_offset=self._segments[-1].base_offset,
            cleaned_through=self.cleaned_through,
            aborted_txns=tuple(
                (txn.producer_id, txn.first_offset, txn.last_offset)
                for txn in self.txn_index.entries
            ),
        )

    @_io_guarded
    def install_cleaned(
        self, result: CleanResult, crash_hook: Callable[[str], None] | None = None
    ) -> bool:
        """Swap the cleaned segments of ``result`` in (see ``flux.storage.compaction.swap``)
        and move the cleaner checkpoint. False, and nothing changed, if the log's segments are
        no longer those the clean read (retention, truncation or another clean came first)."""
        hook = crash_hook or (lambda _step: None)
        work = result.work_directory or self._directory / CLEANING_DIRECTORY
        try:
            if self._closed or not self._still_holds(result):
                return False
            for group in result.groups:
                self._install_group(group, work, hook)
            if result.removed_abort_markers:
                # Their records went before them: nothing is left for the entries to hide.
                self.txn_index.remove_markers(set(result.removed_abort_markers))
            self._forget_tail()
            self._cleaned_through = max(result.cleaned_through, self.cleaned_through)
            _write_atomically(
                self._directory / CLEANER_CHECKPOINT_FILE,
                f"{_CHECKPOINT_VERSION}\n{self._cleaned_through}\n".encode(),
            )
            hook("checkpointed")
            self._check_invariants()
            return True
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _still_holds(self, result: CleanResult) -> bool:
        by_id = {id(segment): i for i, segment in enumerate(self._segments[:-1])}
        return all(
            id(source.token) in by_id and source.token.next_offset == source.next_offset
            for group in result.groups
            for source in group.sources
        )

    def _install_group(self, group: CleanedGroup, work: Path, hook: Callable[[str], None]) -> None:
        base = group.sources[0].base_offset
        name = f"{base:020d}"
        cleaned = work / f"{name}.log"
        if not group.changed:
            # Nothing removed: keep the file, note when it was cleaned (tombstones age from it).
            mtime_ns = cleaned.stat().st_mtime_ns
            os.utime(group.sources[0].log_path, ns=(mtime_ns, mtime_ns))
            return
        first = self._segments.index(group.sources[0].token)
        count = len(group.sources)
        swap = self._directory / f"{name}{SWAP_SUFFIX}"
        os.replace(cleaned, swap)
        fsync_directory(self._directory)
        hook("swapped")
        for source in group.sources:
            source.token.delete_files()
        hook("deleted")
        for suffix in (".index", ".timeindex"):
            if (work / f"{name}{suffix}").exists():
                os.replace(work / f"{name}{suffix}", self._directory / f"{name}{suffix}")
        os.replace(swap, self._directory / f"{name}.log")
        fsync_directory(self._directory)
        hook("installed")
        segment = _DiskSegment.open_existing(
            self._directory, base, self._config.index_interval_bytes
        )
        end = group.sources[-1].next_offset
        if segment.load_index_files(end) is not None:
            segment.recover()
        if segment.next_offset != end:
            raise StorageError(
                f"{self}: cleaned segment {base} ends at {segment.next_offset}, expected {end}"
            )
        self._segments[first : first + count] = [segment]
        self._bases[first : first + count] = [base]

    # -- hooks --------------------------------------------------------------------

    def _create_segment(self, base_offset: int) -> _Segment:
        self._directory_dirty = True
        return _DiskSegment.create(self._directory, base_offset, self._config.index_interval_bytes)

    def _drop_head(self, count: int) -> None:
        if count:
            self._directory_dirty = True
        super()._drop_head(count)

    def _drop_tail(self, index: int) -> None:
        if index < len(self._segments):
            self._directory_dirty = True
        super()._drop_tail(index)

    def _persist_log_start_offset(self) -> None:
        _write_atomically(
            self._directory / LOG_START_OFFSET_FILE,
            f"{_CHECKPOINT_VERSION}\n{self._log_start_offset}\n".encode(),
        )

    def _sync_directory(self) -> None:
        if self._directory_dirty:
            fsync_directory(self._directory)
            self._directory_dirty = False

    def _after_truncate(self) -> None:
        # A truncation that does not survive a crash would resurrect a diverged suffix.
        active = self._segments[-1]
        active.fsync()
        self._sync_directory()

    def _mark_clean_shutdown(self) -> None:
        _write_atomically(self._directory / CLEAN_SHUTDOWN_FILE, b"")

    def _abandon(self) -> None:
        """Release file descriptors without flushing or marking a clean shutdown
        (what a crash leaves behind; used by tests)."""
        self._release()

    def delete(self) -> None:
        """Close the files and remove the whole partition directory."""
        if not self._closed:
            self._release()
        shutil.rmtree(self._directory, ignore_errors=True)


# -- opening a disk log --------------------------------------------------------------


def _scan_directory(directory: Path) -> list[int]:
    """Base offsets of the segment files; removes stray and orphaned files."""
    logs: set[int] = set()
    index_files: list[tuple[int, Path]] = []
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(_STRAY_SUFFIXES):
            logger.warning("%s: removing stray file %s", directory, name)
            _unlink(Path(entry.path))
            continue
        match = SEGMENT_FILE.match(name)
        if match is None:
            if name not in (LOG_START_OFFSET_FILE, CLEAN_SHUTDOWN_FILE, TXN_INDEX_FILE):
                logger.debug("%s: ignoring unknown file %s", directory, name)
            continue
        base = int(match.group(1))
        if match.group(2) == "log":
            logs.add(base)
        else:
            index_files.append((base, Path(entry.path)))
    for base, path in index_files:
        if base not in logs:
            logger.warning("%s: removing index file %s without a segment", directory, path.name)
            _unlink(path)
    bases = sorted(logs)
    # A zero-length segment that is not the last one holds nothing and would break contiguity.
    kept = []
    for i, base in enumerate(bases):
        log_path = directory / f"{base:020d}.log"
        if i < len(bases) - 1 and log_path.stat().st_size == 0:
            logger.warning("%s: removing empty segment %s", directory, log_path.name)
            for suffix in (".log", ".index", ".timeindex"):
                _unlink(directory / f"{base:020d}{suffix}")
            continue
        kept.append(base)
    return kept


def _load_segments(
    directory: Path, config: LogConfig, bases: list[int], recovery_point: int, *, clean: bool
) -> list[_Segment]:
    """Open every segment; recover (CRC-scan) those from the recovery point's segment on
    (none after a clean shutdown) and any whose index files cannot be trusted."""
    first_recovered = len(bases) if clean else max(bisect_right(bases, recovery_point) - 1, 0)
    segments: list[_Segment] = []
    for i, base in enumerate(bases):
        segment = _DiskSegment.open_existing(directory, base, config.index_interval_bytes)
        cut_short = False
        problem: str | None = "after the recovery point"
        if i < first_recovered or clean:
            next_offset = bases[i + 1] if i + 1 < len(bases) else None
            problem = segment.load_index_files(next_offset)
            if problem is not None:
                logger.warning(
                    "%s: segment %s: %s; rebuilding", directory, segment.log_path.name, problem
                )
        if problem is not None:
            dropped, reason = segment.recover()
            if dropped:
                cut_short = True
                logger.warning(
                    "%s: segment %s: truncated at position %d, dropping %d byte(s): %s",
                    directory,
                    segment.log_path.name,
                    segment.size_bytes,
                    dropped,
                    reason,
                )
        if segments and segment.base_offset != segments[-1].next_offset:
            logger.warning(
                "%s: segment %s does not follow offset %d; removing it and %d later segment(s)",
                directory,
                segment.log_path.name,
                segments[-1].next_offset,
                len(bases) - i - 1,
            )
            segment.delete_files()
            _delete_segment_files(directory, bases[i + 1 :])
            break
        segments.append(segment)
        if cut_short and i + 1 < len(bases):
            logger.warning(
                "%s: removing %d segment(s) after the truncated segment %s",
                directory,
                len(bases) - i - 1,
                segment.log_path.name,
            )
            _delete_segment_files(directory, bases[i + 1 :])
            break
    return segments


def _delete_segment_files(directory: Path, bases: list[int]) -> None:
    for base in reversed(bases):
        for suffix in (".log", ".index", ".timeindex"):
            _unlink(directory / f"{base:020d}{suffix}")


def _read_log_start_offset(directory: Path) -> int | None:
    path = directory / LOG_START_OFFSET_FILE
    try:
        lines = path.read_text().split()
    except FileNotFoundError:
        return None
    if len(lines) != 2 or lines[0] != str(_CHECKPOINT_VERSION) or not lines[1].isdigit():
        # Written atomically, so this is outside damage; the segments still bound the log start.
        logger.warning("%s: ignoring malformed %s", directory, LOG_START_OFFSET_FILE)
        return None
    return int(lines[1])


def _write_atomically(path: Path, payload: bytes) -> None:
    """tmp + fsync + rename + directory fsync: readers see the old or the new file whole."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def _mtime_ms(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns // 1_000_000
    except FileNotFoundError:
        return 0


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


# Either log: what the broker holds per partition replica.
Log = PartitionLog | MemoryLog
