"""Segments: a base offset, contiguous batches, a sparse offset index and a time index.

``_Segment`` holds everything that does not depend on where the bytes live;
``_DiskSegment`` keeps them in ``<base>.log`` with ``.index``/``.timeindex``
files, ``_MemorySegment`` in a bytearray. Not thread-safe: the owning log is
the single owner.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from operator import lt
from pathlib import Path

from flux.storage.batch import (
    HEADER,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    BatchInfo,
    Header,
    crc_problem,
    header_problem,
)
from flux.storage.errors import StorageError
from flux.storage.limits import HEADER_SCAN_READ_BYTES, RECOVERY_READ_BYTES

logger = logging.getLogger("flux.storage")

# (base_offset, batchLength) at @0 and lastOffsetDelta at @23: enough to frame and bound a batch.
_BASE_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_FRAME_BYTES = _LAST_OFFSET_DELTA_AT + 4

_INDEX_ENTRY = struct.Struct(">II")  # relative offset, file position
_TIME_INDEX_ENTRY = struct.Struct(">qI")  # timestamp, relative offset
_UINT32 = "I" if array("I").itemsize == 4 else "L"
assert array(_UINT32).itemsize == 4

# One appended batch as the segment indexes it: (position in the appended
# bytes, size, base offset, last offset, max timestamp).
BatchMeta = tuple[int, int, int, int, int]


#: A segment file's name: ``<20-digit base offset>.log|.index|.timeindex``.
SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")


def create_segment_file(directory: Path, base_offset: int) -> int:
    """Create (or truncate) the ``.log`` file of a segment at ``base_offset``; its open fd.
    Pure file-system work with no log state, so it can run off the event loop."""
    path = directory / segment_file_name(base_offset, ".log")
    # O_TRUNC: by the log's invariants no valid data can live at the new active offset.
    return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def fsync_directory(directory: Path) -> None:
    """Make file creations, renames and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Segment:
    """Batches with offsets ``[base_offset, next_offset)`` and their sparse indexes.

    Invariants: batches are contiguous (the first starts at ``base_offset``,
    each next one at the previous last offset + 1); index entries are
    ``(base offset, position)`` of batch starts, strictly increasing in both;
    time index entries ``(T, offset)`` have strictly increasing T, and the batch
    at ``offset`` is the first of the segment whose maxTimestamp reaches T.
    Not thread-safe.
    """

    def __init__(self, base_offset: int, index_interval_bytes: int) -> None:
        self.base_offset = base_offset
        self.next_offset = base_offset
        self.size_bytes = 0
        self.index_interval_bytes = index_interval_bytes
        # Largest maxTimestamp so far (-1: none) and the first batch that reached it.
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        # Clock at the first append (segment.ms counts from here); None = not known yet.
        self.roll_base_ms: int | None = None
        self.last_modified_ms = 0
        # Set when bytes or indexes changed since the last fsync.
        self.dirty = False
        self.index_offsets = array("q")
        self.index_positions = array("q")
        self.time_timestamps = array("q")
        self.time_offsets = array("q")
        self._bytes_since_index = 0
        self._last_batch: BatchInfo | None = None
        # The last append's final header and its position: made a BatchInfo only when asked.
        self._appended_last: tuple[Header, int] | None = None

    # -- storage primitives ------------------------------------------------

    def pread(self, position: int, size: int) -> bytes:
        raise NotImplementedError

    def _write_data(self, data: bytes | bytearray | memoryview) -> None:
        raise NotImplementedError

    def _truncate_data(self, size: int) -> None:
        raise NotImplementedError

    def _write_index_tail(self) -> None:
        """Persist index entries not written yet (disk only)."""

    def _truncate_index_files(self) -> None:
        """Make the index files match the in-memory entries after a truncation (disk only)."""

    def fsync(self) -> None:
        self.dirty = False

    def close(self) -> None:
        """Release OS resources; the segment must not be used afterwards."""

    def delete_files(self) -> None:
        """Close and remove the segment's bytes and indexes."""

    # -- bookkeeping ------------------------------------------------------------

    def _reset_indexes(self) -> None:
        self.next_offset = self.base_offset
        self.size_bytes = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        del self.index_offsets[:]
        del self.index_positions[:]
        del self.time_timestamps[:]
        del self.time_offsets[:]
        self._bytes_since_index = 0
        self._last_batch = None
        self._appended_last = None

    def _track(self, base_offset: int, position: int, size: int, max_timestamp: int) -> None:
        """Index one batch stored at ``position`` (Kafka's LogSegment.append cadence)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if self._bytes_since_index >= self.index_interval_bytes:
            self.index_offsets.append(base_offset)
            self.index_positions.append(position)
            self._bytes_since_index = 0
            self._add_time_entry()
        self._bytes_since_index += size

    def seal_time_index(self) -> None:
        """Record the current largest timestamp if the time index does not have it yet.

        Called at index cadence, on roll and on close, so that the last time
        index entry of an inactive segment is its largest timestamp.
        """
        if self._add_time_entry():
            self._write_index_tail()

    def _add_time_entry(self) -> bool:
        last = self.time_timestamps[-1] if self.time_timestamps else -1
        if self.max_timestamp <= last:
            return False
        self.time_timestamps.append(self.max_timestamp)
        self.time_offsets.append(self.offset_of_max_timestamp)
        return True

    def append(
        self,
        data: bytes | bytearray | memoryview,
        batches: list[BatchMeta],
        last_header: Header,
        now_ms: int,
    ) -> None:
        """Store validated, offset-assigned batches; ``batches`` positions are relative to
        ``data``; ``last_header`` is the final batch's (as stored)."""
        start = self.size_bytes
        self._write_data(data)
        for position, size, base_offset, _last_offset, max_timestamp in batches:
            self._track(base_offset, start + position, size, max_timestamp)
        self.size_bytes = start + len(data)
        self.next_offset = batches[-1][3] + 1
        self._last_batch = None
        self._appended_last = (last_header, start + batches[-1][0])
        if self.roll_base_ms is None:
            self.roll_base_ms = now_ms
        self.last_modified_ms = now_ms
        self.dirty = True
        self._write_index_tail()

    def roll_base(self, now_ms: int) -> int:
        """When segment.ms starts counting: the first append, or for a loaded segment the
        first batch's maxTimestamp (Kafka's rollingBasedTimestamp), never in the future."""
        if self.roll_base_ms is None:
            base = now_ms
            if self.size_bytes:
                for _position, header in self.scan_headers(0):
                    if 0 <= header.max_timestamp <= now_ms:
                        base = header.max_timestamp
                    break
            self.roll_base_ms = base
        return self.roll_base_ms

    def largest_timestamp_ms(self) -> int:
        """For retention: the largest batch timestamp, else when the segment was last written."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms

    # -- lookups ----------------------------------------------------------------

    def floor_position(self, offset: int) -> int:
        """Position of the last indexed batch starting at or before ``offset`` (0 if none)."""
        i = bisect_right(self.index_offsets, offset) - 1
        return self.index_positions[i] if i >= 0 else 0

    def scan_headers(self, position: int, end: int | None = None) -> Iterator[tuple[int, Header]]:
        """Headers of the batches starting at ``position`` (a batch start) up to ``end``."""
        end = self.size_bytes if end is None else end
        buffer = b""
        buffer_start = position
        unpack_from = HEADER.unpack_from
        while position < end:
            rel = position - buffer_start
            if rel + HEADER_BYTES > len(buffer):
                buffer = self.pread(position, min(HEADER_SCAN_READ_BYTES, end - position))
                buffer_start = position
                rel = 0
                if len(buffer) < HEADER_BYTES:
                    raise StorageError(
                        f"segment {self.base_offset}: truncated batch header at position {position}"
                    )
            header = Header._make(unpack_from(buffer, rel))
            if header.magic != MAGIC_V2 or header.batch_length < MIN_BATCH_LENGTH:
                raise StorageError(
                    f"segment {self.base_offset}: no valid batch header at position {position}"
                )
            yield position, header
            position += header.batch_length + LOG_OVERHEAD

    def find_batch(self, offset: int) -> tuple[int, Header]:
        """The position and header of the batch containing ``offset``."""
        for position, header in self.scan_headers(self.floor_position(offset)):
            if header.base_offset + header.last_offset_delta >= offset:
                if header.base_offset > offset:
                    break
                return position, header
        raise StorageError(
            f"segment {self.base_offset}: no batch contains offset {offset} "
            f"(segment holds [{self.base_offset}, {self.next_offset}))"
        )

    def read(
        self, offset: int, max_bytes: int, limit_offset: int, *, first: bool
    ) -> tuple[bytes, bool]:
        """Whole batches from the one containing ``offset``: at most ``max_bytes`` (but the
        first batch regardless when ``first``), only batches ending below ``limit_offset``.

        Returns the bytes and whether the segment was read to its end (the
        caller may continue with the next segment).
        """
        position, header = self.find_batch(offset)
        end = self.size_bytes
        # Batches at or after the first indexed one starting at/after the limit never qualify:
        # this bounds the read when limit_offset (the high watermark) lies inside the segment.
        j = bisect_left(self.index_offsets, limit_offset)
        if j < len(self.index_offsets):
            end = min(end, self.index_positions[j])
        available = end - position
        wanted = min(max(max_bytes, 0), available)
        chunk = self.pread(position, wanted) if wanted > 0 else b""
        n = len(chunk)
        cut = 0
        limit_hit = False
        while cut + _FRAME_BYTES <= n:
            base_offset, length = _BASE_AND_LENGTH.unpack_from(chunk, cut)
            last_offset = (
                base_offset + _LAST_OFFSET_DELTA.unpack_from(chunk, cut + _LAST_OFFSET_DELTA_AT)[0]
            )
            if last_offset >= limit_offset:
                limit_hit = True
                break
            size = length + LOG_OVERHEAD
            if cut + size > n:
                break
            cut += size
        if cut == 0:
            last_offset = header.base_offset + header.last_offset_delta
            if first and last_offset < limit_offset:
                # Kafka's rule: the first batch is returned even when larger than max_bytes.
                size = header.batch_length + LOG_OVERHEAD
                return (chunk if n == size else self.pread(position, size)), False
            return b"", False
        data = chunk if cut == n else chunk[:cut]
        exhausted = not limit_hit and cut == available and end == self.size_bytes
        return data, exhausted

    def find_by_timestamp(self, timestamp_ms: int, min_offset: int) -> tuple[int, bytes] | None:
        """First batch with maxTimestamp >= timestamp_ms and last offset >= min_offset."""
        i = bisect_left(self.time_timestamps, timestamp_ms)
        # Batches before the entry i-1's batch all have maxTimestamp < timestamp_ms.
        start = self.time_offsets[i - 1] if i > 0 else self.base_offset
        start = max(start, min_offset)
        if start >= self.next_offset:
            return None
        for position, header in self.scan_headers(self.floor_position(start)):
            if (
                header.max_timestamp >= timestamp_ms
                and header.base_offset + header.last_offset_delta >= min_offset
            ):
                return header.base_offset, self.pread(position, header.batch_length + LOG_OVERHEAD)
        return None

    def batch_infos(self, from_offset: int) -> Iterator[BatchInfo]:
        """Batches whose last offset is >= from_offset, in order."""
        if from_offset >= self.next_offset:
            return
        start = 0 if from_offset <= self.base_offset else self.find_batch(from_offset)[0]
        for position, header in self.scan_headers(start):
            if header.base_offset + header.last_offset_delta >= from_offset:
                yield BatchInfo.from_header(header, position)

    def last_batch(self) -> BatchInfo | None:
        if self._last_batch is None and self._appended_last is not None:
            self._last_batch = BatchInfo.from_header(*self._appended_last)
            self._appended_last = None
        if self._last_batch is None and self.size_bytes:
            start = self.index_positions[-1] if self.index_positions else 0
            for position, header in self.scan_headers(start):
                self._last_batch = BatchInfo.from_header(header, position)
        return self._last_batch

    # -- truncation -------------------------------------------------------------

    def truncate_at(self, position: int, next_offset: int) -> None:
        """Drop the batch starting at ``position`` and everything after it."""
        self._truncate_data(position)
        self.size_bytes = position
        self.next_offset = next_offset
        k = bisect_left(self.index_positions, position)
        del self.index_offsets[k:]
        del self.index_positions[k:]
        t = bisect_left(self.time_offsets, next_offset)
        del self.time_timestamps[t:]
        del self.time_offsets[t:]
        # The kept time entries stay exact (each names a kept batch); recompute the running
        # maximum over the batches after the last kept entry.
        if t:
            self.max_timestamp = self.time_timestamps[-1]
            self.offset_of_max_timestamp = self.time_offsets[-1]
            scan_from = self.floor_position(self.offset_of_max_timestamp)
        else:
            self.max_timestamp = -1
            self.offset_of_max_timestamp = self.base_offset
            scan_from = 0
        self._last_batch = None
        self._appended_last = None
        for batch_position, header in self.scan_headers(scan_from, position):
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.base_offset
            self._last_batch = BatchInfo.from_header(header, batch_position)
        self._bytes_since_index = position - (
            self.index_positions[-1] if self.index_positions else 0
        )
        if position == 0:
            self.roll_base_ms = None
        # Sealed again: the kept batches' largest timestamp is the last time entry, as below
        # the recovery point an index file is trusted without a scan.
        self._add_time_entry()
        self.dirty = True
        self._truncate_index_files()


class _MemorySegment(_Segment):
    """A segment whose bytes live in one bytearray."""

    def __init__(self, base_offset: int, index_interval_bytes: int) -> None:
        super().__init__(base_offset, index_interval_bytes)
        self._data = bytearray()

    def pread(self, position: int, size: int) -> bytes:
        with memoryview(self._data) as view:
            return view[position : position + size].tobytes()

    def _write_data(self, data: bytes | bytearray | memoryview) -> None:
        self._data += data

    def _truncate_data(self, size: int) -> None:
        del self._data[size:]

    def delete_files(self) -> None:
        self._data = bytearray()

    def close(self) -> None:
        self._data = bytearray()


class _DiskSegment(_Segment):
    """``<base>.log`` read with os.pread and appended with os.write, plus its index files.

    The log file descriptor stays open for the segment's lifetime. The index
    files are open only while they are written: new entries stay in memory
    (the authoritative copy while the log is open) and reach the files at the
    next ``fsync``, which writes, syncs and closes them. So a segment holds one
    file descriptor, and a broker with 10,000 partition replicas about 10,000,
    not 30,000. A crash loses nothing by this: segments from the recovery
    point on are rebuilt from their batches at the next open, and every
    segment below it was fsynced, index files included.
    """

    def __init__(
        self, directory: Path, base_offset: int, index_interval_bytes: int, fd: int
    ) -> None:
        super().__init__(base_offset, index_interval_bytes)
        self.log_path = directory / segment_file_name(base_offset, ".log")
        self.index_path = directory / segment_file_name(base_offset, ".index")
        self.time_index_path = directory / segment_file_name(base_offset, ".timeindex")
        self._fd = fd
        self._index_fd: int | None = None
        self._time_index_fd: int | None = None
        self._index_written = 0
        self._time_index_written = 0
        #: Index bytes written (or truncated) since the files were last fsynced.
        self._index_unsynced = False

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        *,
        fresh: bool = False,
        fd: int | None = None,
    ) -> _DiskSegment:
        """A new, empty segment file (``fresh``: in a directory created empty just now, so
        there are no stale index files to remove). ``fd``: the file, already created empty by
        ``create_segment_file`` (which may run on another thread); the segment owns it."""
        if fd is None:
            fd = create_segment_file(directory, base_offset)
        segment = cls(directory, base_offset, index_interval_bytes, fd)
        # Index files of an older segment at this offset are stale: remove them. The new
        # (empty) files are created by the first fsync, not here: creating a partition then
        # costs one file, not three.
        for stale in () if fresh else (segment.index_path, segment.time_index_path):
            try:
                stale.unlink()
            except FileNotFoundError:
                pass
        segment._index_unsynced = True
        segment.dirty = True
        return segment

    @classmethod
    def open_existing(
        cls, directory: Path, base_offset: int, index_interval_bytes: int
    ) -> _DiskSegment:
        path = directory / segment_file_name(base_offset, ".log")
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        segment = cls(directory, base_offset, index_interval_bytes, fd)
        stat = os.fstat(fd)
        segment.size_bytes = stat.st_size
        segment.last_modified_ms = stat.st_mtime_ns // 1_000_000
        return segment

    # -- primitives -------------------------------------------------------------

    def pread(self, position: int, size: int) -> bytes:
        data = os.pread(self._fd, size, position)
        if len(data) == size or not data:
            return data
        parts = [data]  # a huge read may come back short; finish it
        got = len(data)
        while got < size:
            more = os.pread(self._fd, size - got, position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def _write_data(self, data: bytes | bytearray | memoryview) -> None:
        with memoryview(data) as view:
            written = 0
            try:
                while written < len(view):
                    written += os.write(self._fd, view[written:])
            except BaseException:
                # All or nothing: drop a partial write (e.g. disk full) before re-raising.
                os.ftruncate(self._fd, self.size_bytes)
                raise

    def _truncate_data(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def _open_index_files(self) -> tuple[int, int]:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        if self._index_fd is None:
            self._index_fd = os.open(self.index_path, flags, 0o644)
        if self._time_index_fd is None:
            self._time_index_fd = os.open(self.time_index_path, flags, 0o644)
        return self._index_fd, self._time_index_fd

    def _index_tail_pending(self) -> bool:
        return (
            len(self.index_offsets) != self._index_written
            or len(self.time_offsets) != self._time_index_written
        )

    def _write_index_tail(self) -> None:
        # Deferred to the next fsync (see the class docstring); the segment must be flushed.
        if self._index_tail_pending():
            self.dirty = True

    def _persist_index_tail(self) -> None:
        """Append the entries not in the files yet (the files must be open)."""
        n = len(self.index_offsets)
        m = len(self.time_offsets)
        if n == self._index_written and m == self._time_index_written:
            return
        index_fd, time_index_fd = self._open_index_files()
        base = self.base_offset
        if n > self._index_written:
            w = self._index_written
            pack = _INDEX_ENTRY.pack
            payload = b"".join(
                pack(offset - base, position)
                for offset, position in zip(
                    self.index_offsets[w:], self.index_positions[w:], strict=True
                )
            )
            os.write(index_fd, payload)
            self._index_written = n
        if m > self._time_index_written:
            w = self._time_index_written
            pack = _TIME_INDEX_ENTRY.pack
            payload = b"".join(
                pack(timestamp, offset - base)
                for timestamp, offset in zip(
                    self.time_timestamps[w:], self.time_offsets[w:], strict=True
                )
            )
            os.write(time_index_fd, payload)
            self._time_index_written = m
        self._index_unsynced = True
        self.dirty = True

    def _truncate_index_files(self) -> None:
        index_fd, time_index_fd = self._open_index_files()
        try:
            self._index_written = min(self._index_written, len(self.index_offsets))
            self._time_index_written = min(self._time_index_written, len(self.time_offsets))
            os.ftruncate(index_fd, self._index_written * _INDEX_ENTRY.size)
            os.ftruncate(time_index_fd, self._time_index_written * _TIME_INDEX_ENTRY.size)
            self._index_unsynced = True
            self._persist_index_tail()
        finally:
            self._close_index_files()
        self.dirty = True

    def _rewrite_index_files(self) -> None:
        self._index_written = 0
        self._time_index_written = 0
        self._truncate_index_files()

    def fsync(self) -> None:
        os.fsync(self._fd)
        if self._index_tail_pending() or self._index_unsynced:
            index_fd, time_index_fd = self._open_index_files()
            try:
                self._persist_index_tail()
                os.fsync(index_fd)
                os.fsync(time_index_fd)
            finally:
                self._close_index_files()
            self._index_unsynced = False
        self.dirty = False

    def _close_index_files(self) -> None:
        for fd in (self._index_fd, self._time_index_fd):
            if fd is not None:
                os.close(fd)
        self._index_fd = None
        self._time_index_fd = None

    def close(self) -> None:
        self._close_index_files()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete_files(self) -> None:
        self.close()
        # The .log goes first: index files without a .log are strays that open() removes.
        for path in (self.log_path, self.index_path, self.time_index_path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    # -- loading and recovery -----------------------------------------------

    def load_index_files(self, next_offset: int | None) -> str | None:
        """Adopt the index files of a segment that is not recovered.

        ``next_offset`` is the next segment's base offset; None for the last
        segment after a clean shutdown, whose tail is then framed from the
        last index entry on. Returns why the files cannot be trusted, or None.
        """
        try:
            index_bytes = self.index_path.read_bytes()
            time_index_bytes = self.time_index_path.read_bytes()
        except FileNotFoundError as error:
            return f"{Path(error.filename).name} is missing"
        if len(index_bytes) % _INDEX_ENTRY.size:
            return f"offset index size {len(index_bytes)} is not a multiple of {_INDEX_ENTRY.size}"
        if len(time_index_bytes) % _TIME_INDEX_ENTRY.size:
            return f"time index size {len(time_index_bytes)} is not a multiple of {_TIME_INDEX_ENTRY.size}"
        entries = array(_UINT32, index_bytes)
        if sys.byteorder == "little":
            entries.byteswap()
        base = self.base_offset
        relative_offsets = entries[0::2]
        positions = entries[1::2]
        time_entries = list(_TIME_INDEX_ENTRY.iter_unpack(time_index_bytes))
        timestamps = [timestamp for timestamp, _ in time_entries]
        time_relative = [relative for _, relative in time_entries]
        if not (
            all(map(lt, relative_offsets, relative_offsets[1:]))
            and all(map(lt, positions, positions[1:]))
        ):
            return "offset index entries are not increasing"
        if not (
            all(map(lt, timestamps, timestamps[1:]))
            and all(map(lt, time_relative, time_relative[1:]))
        ):
            return "time index entries are not increasing"
        if positions and positions[-1] >= self.size_bytes:
            return f"offset index points at position {positions[-1]} past the end {self.size_bytes}"
        self.index_offsets = array("q", (base + relative for relative in relative_offsets))
        self.index_positions = array("q", positions)
        self.time_timestamps = array("q", timestamps)
        self.time_offsets = array("q", (base + relative for relative in time_relative))
        self._index_written = len(self.index_offsets)
        self._time_index_written = len(self.time_offsets)
        if self.time_timestamps:
            self.max_timestamp = self.time_timestamps[-1]
            self.offset_of_max_timestamp = self.time_offsets[-1]
        tail_start = self.index_positions[-1] if self.index_positions else 0
        self._bytes_since_index = self.size_bytes - tail_start
        expected = self.index_offsets[-1] if self.index_offsets else base
        try:
            if next_offset is not None:
                return self._check_index_end(next_offset, tail_start, expected)
            return self._frame_tail(tail_start, expected)
        except StorageError as error:
            return str(error)

    def _check_index_end(self, next_offset: int, tail_start: int, expected: int) -> str | None:
        if self.index_offsets and self.index_offsets[-1] >= next_offset:
            return f"offset index names offset {self.index_offsets[-1]} beyond the segment"
        if self.time_offsets and self.time_offsets[-1] >= next_offset:
            return f"time index names offset {self.time_offsets[-1]} beyond the segment"
        if self.size_bytes == 0:
            return "segment file is empty"
        for _position, header in self.scan_headers(tail_start):
            if header.base_offset != expected:
                return f"offset index entry {expected} points at a batch with baseOffset {header.base_offset}"
            break
        self.next_offset = next_offset
        return None

    def _frame_tail(self, position: int, expected: int) -> str | None:
        """Walk the headers after the last index entry to find the segment's end."""
        last: BatchInfo | None = None
        for batch_position, header in self.scan_headers(position):
            if header.base_offset != expected:
                return f"batch at position {batch_position} has baseOffset {header.base_offset}, expected {expected}"
            if batch_position + header.batch_length + LOG_OVERHEAD > self.size_bytes:
                return f"torn batch at position {batch_position}"
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.base_offset
            last = BatchInfo.from_header(header, batch_position)
            expected = last.last_offset + 1
        self.next_offset = expected if last is not None else self.base_offset
        self._last_batch = last
        self._appended_last = None
        return None

    def recover(self) -> tuple[int, str | None]:
        """Validate every batch (framing, magic, CRC32C, offset continuity), truncate at the
        first invalid one and rebuild the indexes. Returns (bytes dropped, why)."""
        file_size = os.fstat(self._fd).st_size
        self._reset_indexes()
        position = 0
        expected = self.base_offset
        buffer = b""
        buffer_start = 0
        reason: str | None = None
        last: BatchInfo | None = None
        while position < file_size:
            rel = position - buffer_start
            if rel + HEADER_BYTES > len(buffer):
                buffer = self.pread(position, min(RECOVERY_READ_BYTES, file_size - position))
                buffer_start = position
                rel = 0
                if len(buffer) < HEADER_BYTES:
                    reason = f"torn batch header ({len(buffer)} bytes)"
                    break
            header = Header._make(HEADER.unpack_from(buffer, rel))
            reason = header_problem(header, file_size - position)
            if reason is None and header.base_offset != expected:
                reason = f"baseOffset {header.base_offset} does not follow the previous batch (expected {expected})"
            if reason is not None:
                break
            size = header.batch_length + LOG_OVERHEAD
            if rel + size > len(buffer):
                buffer = self.pread(
                    position, max(size, min(RECOVERY_READ_BYTES, file_size - position))
                )
                buffer_start = position
                rel = 0
            reason = crc_problem(buffer, rel, header)
            if reason is not None:
                break
            self._track(header.base_offset, position, size, header.max_timestamp)
            last = BatchInfo.from_header(header, position)
            position += size
            expected = last.last_offset + 1
        dropped = file_size - position
        if dropped:
            os.ftruncate(self._fd, position)
        self.size_bytes = position
        self.next_offset = expected
        self._last_batch = last
        self._appended_last = None
        # Sealed like a rolled segment: the last time entry is the largest timestamp, which a
        # later open (that does not recover this segment) reads back as max_timestamp.
        self._add_time_entry()
        self._rewrite_index_files()
        self.dirty = True
        return dropped, reason
