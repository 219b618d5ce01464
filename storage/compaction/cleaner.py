"""One clean of one log: the map pass and the rewrite (any thread), then ``commit`` on the
log's owner thread (``PartitionLog.install_cleaned``).

Tombstones: a cleaned segment's file mtime is when its data was first cleaned (the first clean
sets it; a later clean that merges cleaned segments gives the result the youngest of theirs).
Tombstones in a segment cleaned before (below the log's cleaner checkpoint) whose mtime is
older than ``delete.retention.ms`` are dropped, so a reader has at least that long after the
clean that first kept a deletion to see it. Segments cleaned before and segments cleaned for
the first time are never merged, so a merge never makes a young tombstone look old.

Transactions (Kafka's rules). The broker cleans only below the last stable offset, so every
transactional batch cleaned belongs to a transaction that ended; ``LogView.aborted_txns``
says which ended aborted. Batches of **aborted** transactions are removed (their records
never count in the key map). Records of **committed** transactions are compacted like any
other. A **marker** (control batch) stays while any record of its transaction is left in the
log before it (a rebuild of the producer state from the log would otherwise see that
transaction open for ever), and goes, like a tombstone, once its segment was cleaned before
and is older than ``delete.retention.ms`` and its transaction has nothing left (an abort
marker's records are all removed, so it goes then; the broker drops its aborted-transaction
index entry with it: ``CleanResult.removed_abort_markers``). A producer's last batch keeps
its header whatever happens to its records (``keep_batches_ending_at``).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from flux.storage._segment import BatchMeta, _DiskSegment, fsync_directory
from flux.storage.batch import CONTROL, HEADER, TRANSACTIONAL, Header
from flux.storage.compaction.batches import empty_batch, iter_file_batches
from flux.storage.compaction.planner import (
    CleanPlan,
    DedupeMap,
    LogView,
    RecordCodec,
    SegmentView,
    surviving,
)
from flux.storage.compaction.swap import CLEANING_DIRECTORY
from flux.storage.limits import MAX_RELATIVE_OFFSET

__all__ = ["CleanResult", "CleanedGroup", "LogCleaner"]

#: Bytes of batches handed to the cleaned segment per append.
WRITE_CHUNK_BYTES = 1 << 20
_TIMESTAMP_TYPE = 0x08


@dataclass
class CleanedGroup:
    """Segments ``sources`` rewritten as one segment in ``.cleaning/<base>.log``."""

    sources: tuple[SegmentView, ...]
    changed: bool


@dataclass
class CleanResult:
    directory: Path
    plan: CleanPlan
    groups: list[CleanedGroup]
    #: The new cleaner checkpoint: every offset below it has been through a clean.
    cleaned_through: int
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    map_entries: int = 0
    seconds: float = 0.0
    #: Where the cleaned segments wait for ``PartitionLog.install_cleaned``.
    work_directory: Path | None = None
    extra: dict[str, int] = field(default_factory=dict)
    #: Offsets of the abort markers this clean removed (their index entries go with them).
    removed_abort_markers: list[int] = field(default_factory=list)


class _Throttle:
    """At most ``rate`` bytes/s of reads and writes (``rate`` < 0: none)."""

    def __init__(self, rate: int, sleep: Callable[[float], None]) -> None:
        self._rate = rate
        self._sleep = sleep
        self._started = time.monotonic()
        self._bytes = 0

    def spend(self, count: int) -> None:
        if self._rate <= 0:
            return
        self._bytes += count
        ahead = self._bytes / self._rate - (time.monotonic() - self._started)
        if ahead > 0.01:
            self._sleep(ahead)


class _GroupWriter:
    """Writes one cleaned segment into ``.cleaning/``, merging consecutive emptied batches of
    one leader epoch into one empty span."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        self.segment = _DiskSegment.create(directory, base_offset, index_interval_bytes, fresh=True)
        self._chunk = bytearray()
        self._metas: list[BatchMeta] = []
        self._last_header: Header | None = None
        # A run of removed batches: [first offset, last offset, epoch, timestamp type, max ts].
        self._run: list[int] | None = None
        self.written = 0

    def add(self, batch: bytes | memoryview, header: Header) -> None:
        self._flush_run()
        self._add(batch, header)

    def _add(self, batch: bytes | memoryview, header: Header) -> None:
        position = len(self._chunk)
        self._chunk += batch
        last = header.base_offset + header.last_offset_delta
        self._metas.append((position, len(batch), header.base_offset, last, header.max_timestamp))
        self._last_header = header
        if len(self._chunk) >= WRITE_CHUNK_BYTES:
            self._write()

    def remove(self, header: Header) -> None:
        """The batch lost every record: its span joins the pending empty run."""
        last = header.base_offset + header.last_offset_delta
        run = self._run
        kind = header.attributes & _TIMESTAMP_TYPE
        if run is not None and run[2] == header.partition_leader_epoch and run[3] == kind:
            run[1] = last
            run[4] = max(run[4], header.max_timestamp)
            return
        self._flush_run()
        self._run = [
            header.base_offset,
            last,
            header.partition_leader_epoch,
            kind,
            header.max_timestamp,
        ]

    def _flush_run(self) -> None:
        run, self._run = self._run, None
        if run is None:
            return
        first, last, epoch, kind, max_timestamp = run
        batch = empty_batch(
            first, last, leader_epoch=epoch, timestamp_ms=max_timestamp, attributes=kind
        )
        self._add(batch, Header._make(HEADER.unpack_from(batch, 0)))

    def _write(self) -> None:
        if not self._metas:
            return
        assert self._last_header is not None
        self.segment.append(bytes(self._chunk), self._metas, self._last_header, 0)
        self.written += len(self._chunk)
        self._chunk = bytearray()
        self._metas = []

    def finish(self, mtime_ms: int) -> None:
        self._flush_run()
        self._write()
        self.segment.seal_time_index()
        self.segment.fsync()
        self.segment.close()
        ns = mtime_ms * 1_000_000
        os.utime(self.segment.log_path, ns=(ns, ns))


class LogCleaner:
    """Cleans logs with ``codec`` and at most ``dedupe_buffer_bytes`` of key map, reading and
    writing at most ``io_max_bytes_per_second`` (-1: unthrottled). ``crash_hook("cleaning")``
    is called after each cleaned segment is written (tests kill the process there, and
    between the steps of ``PartitionLog.install_cleaned``)."""

    def __init__(
        self,
        codec: RecordCodec,
        *,
        dedupe_buffer_bytes: int = 64 << 20,
        io_max_bytes_per_second: int = -1,
        clock_ms: Callable[[], int] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        crash_hook: Callable[[str], None] | None = None,
    ) -> None:
        self._codec = codec
        self._hook = crash_hook or (lambda _step: None)
        self.dedupe_buffer_bytes = dedupe_buffer_bytes
        self.io_max_bytes_per_second = io_max_bytes_per_second
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._sleep = sleep

    def clean(
        self, view: LogView, plan: CleanPlan, keep_batches_ending_at: Collection[int] = ()
    ) -> CleanResult:
        """Map the dirty part, rewrite the cleanable segments into ``.cleaning/``. Reads the
        segment files through its own descriptors: safe on any thread while the owner goes on
        (``install_cleaned`` refuses the result if the segments changed meanwhile).
        ``keep_batches_ending_at``: last offsets of batches whose header must stay even when
        all their records go (each idempotent producer's last batch, as Kafka keeps it)."""
        started = time.monotonic()
        now_ms = self._clock_ms()
        throttle = _Throttle(self.io_max_bytes_per_second, self._sleep)
        dedupe = DedupeMap(self.dedupe_buffer_bytes)
        result = CleanResult(view.directory, plan, [], plan.first_dirty)
        keep = set(keep_batches_ending_at)
        mapped_end = self._map(
            plan, dedupe, keep, throttle, result, _Transactions(view.aborted_txns)
        )
        result.cleaned_through = mapped_end
        result.map_entries = len(dedupe)
        # A directory of this clean's own: a clean left running by a broker that died (its
        # worker process outliving it) can never write into the files of a later one.
        for stale in view.directory.glob(CLEANING_DIRECTORY + "*"):
            shutil.rmtree(stale, ignore_errors=True)
        work = view.directory / f"{CLEANING_DIRECTORY}-{uuid.uuid4().hex[:12]}"
        work.mkdir()
        result.work_directory = work
        config = view.config
        txns = _Transactions(view.aborted_txns)
        for sources in _groups(plan, mapped_end, view.cleaned_through, config.segment_bytes):
            previously_cleaned = sources[-1].next_offset <= view.cleaned_through
            writer = _GroupWriter(work, sources[0].base_offset, config.index_interval_bytes)
            removed_before = result.records_removed
            for source in sources:
                drop_tombstones = (
                    previously_cleaned and source.modified_ms < now_ms - config.delete_retention_ms
                )
                for header, batch in iter_file_batches(source.log_path, source.size_bytes):
                    throttle.spend(len(batch))
                    result.bytes_read += len(batch)
                    self._rewrite(
                        batch, header, dedupe, drop_tombstones, keep, writer, result, txns
                    )
            mtime = max(s.modified_ms for s in sources) if previously_cleaned else now_ms
            writer.finish(mtime)
            throttle.spend(writer.written)
            result.bytes_written += writer.written
            changed = (
                result.records_removed > removed_before
                or len(sources) > 1
                or (writer.written != sum(s.size_bytes for s in sources))
            )
            result.groups.append(CleanedGroup(tuple(sources), changed))
            self._hook("cleaning")
        fsync_directory(work)
        result.seconds = time.monotonic() - started
        return result

    def _map(
        self,
        plan: CleanPlan,
        dedupe: DedupeMap,
        keep: set[int],
        throttle: _Throttle,
        result: CleanResult,
        txns: _Transactions,
    ) -> int:
        """Record the newest offset of every key from the first dirty offset on; returns
        where the map ends (the map fills: a segment boundary if one was reached). Markers and
        the batches of aborted transactions are left out."""
        last_of_producer: dict[int, int] = {}
        mapped_end = plan.first_dirty
        for segment in plan.cleanable:
            if segment.next_offset <= plan.first_dirty:
                continue
            for header, batch in iter_file_batches(segment.log_path, segment.size_bytes):
                last = header.base_offset + header.last_offset_delta
                if last < plan.first_dirty:
                    continue
                throttle.spend(len(batch))
                result.bytes_read += len(batch)
                if header.producer_id >= 0:
                    last_of_producer[header.producer_id] = last
                if (
                    header.attributes & CONTROL
                    or header.records_count == 0
                    or (header.attributes & TRANSACTIONAL and txns.aborted(header))
                ):
                    mapped_end = last + 1
                    continue
                if not dedupe.has_room(header.records_count):
                    if mapped_end == plan.first_dirty:
                        # Not even one batch fits: nothing can be cleaned with this map.
                        return plan.first_dirty
                    keep.update(last_of_producer.values())
                    return mapped_end
                _, _, records = self._codec.record_keys(batch)
                dedupe.put_all(records)
                mapped_end = last + 1
        keep.update(last_of_producer.values())
        return mapped_end

    def _rewrite(
        self,
        batch: bytes,
        header: Header,
        dedupe: DedupeMap,
        drop_tombstones: bool,
        keep: set[int],
        writer: _GroupWriter,
        result: CleanResult,
        txns: _Transactions,
    ) -> None:
        last = header.base_offset + header.last_offset_delta
        if header.attributes & CONTROL:
            # A marker: kept while its transaction has records left (see the module docstring).
            removable = drop_tombstones and not txns.end(header) and last not in keep
            if removable:
                if txns.was_aborted_marker(last):
                    result.removed_abort_markers.append(last)
                writer.remove(header)
            else:
                writer.add(batch, header)
            return
        if header.records_count == 0:
            if header.producer_id < 0:
                writer.remove(header)  # an empty span: merges with its neighbours
            else:
                writer.add(batch, header)
            return
        transactional = bool(header.attributes & TRANSACTIONAL)
        if transactional and txns.aborted(header):
            result.records_removed += header.records_count
            if header.producer_id >= 0 and last in keep:
                decoded_header, data, _records = self._codec.record_keys(batch)
                filtered = self._codec.filter_batch(batch, decoded_header, data, [])
                writer.add(filtered, Header._make(HEADER.unpack_from(filtered, 0)))
                txns.written(header.producer_id)
            else:
                writer.remove(header)
            return
        decoded_header, data, records = self._codec.record_keys(batch)
        result.records_read += len(records)
        kept = surviving(records, dedupe, drop_tombstones=drop_tombstones)
        result.records_removed += len(records) - len(kept)
        if len(kept) == len(records):
            writer.add(batch, header)
            if transactional:
                txns.written(header.producer_id)
        elif kept or (header.producer_id >= 0 and last in keep):
            filtered = self._codec.filter_batch(batch, decoded_header, data, kept)
            writer.add(filtered, Header._make(HEADER.unpack_from(filtered, 0)))
            if transactional:
                txns.written(header.producer_id)
        else:
            writer.remove(header)


class _Transactions:
    """Which transactional batches belong to aborted transactions (from the log's
    aborted-transaction index), and, in log order, whether a producer's current transaction
    still has a batch written to the cleaned log (its marker must stay then)."""

    def __init__(self, aborted: tuple[tuple[int, int, int], ...]) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for producer_id, first, last in sorted(aborted, key=lambda entry: entry[1]):
            self._ranges.setdefault(producer_id, []).append((first, last))
        self._firsts = {pid: [first for first, _ in ranges] for pid, ranges in self._ranges.items()}
        self._abort_markers = {last for _pid, _first, last in aborted}
        self._with_data: set[int] = set()

    def aborted(self, header: Header) -> bool:
        """The batch lies inside one of its producer's aborted transactions."""
        ranges = self._ranges.get(header.producer_id)
        if not ranges:
            return False
        index = bisect_right(self._firsts[header.producer_id], header.base_offset) - 1
        return index >= 0 and header.base_offset <= ranges[index][1]

    def written(self, producer_id: int) -> None:
        self._with_data.add(producer_id)

    def end(self, marker: Header) -> bool:
        """At a producer's marker: whether its transaction kept any batch; starts the next."""
        had = marker.producer_id in self._with_data
        self._with_data.discard(marker.producer_id)
        return had

    def was_aborted_marker(self, offset: int) -> bool:
        return offset in self._abort_markers


def _groups(
    plan: CleanPlan, mapped_end: int, cleaned_through: int, segment_bytes: int
) -> list[list[SegmentView]]:
    """Consecutive cleanable segments below ``mapped_end`` merged while they fit one segment
    (by their current size) and its index, never mixing segments cleaned before with ones
    cleaned for the first time."""
    groups: list[list[SegmentView]] = []
    for segment in plan.cleanable:
        if segment.base_offset >= mapped_end:
            break
        old = segment.next_offset <= cleaned_through
        if groups:
            group = groups[-1]
            fits = (
                sum(s.size_bytes for s in group) + segment.size_bytes <= segment_bytes
                and segment.next_offset - 1 - group[0].base_offset <= MAX_RELATIVE_OFFSET
                and (group[-1].next_offset <= cleaned_through) == old
            )
            if fits:
                group.append(segment)
                continue
        groups.append([segment])
    return groups
