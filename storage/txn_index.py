"""The aborted-transaction index of one partition log (Kafka's ``TransactionIndex``).

A ``read_committed`` consumer must skip the records of aborted transactions. The fetch answer
lists, for the offsets it returns, every aborted transaction as ``(producer id, first
offset)``; the client drops that producer's records from the first offset up to the
transaction's abort marker. This index is where the broker finds them: one ``AbortedTxn`` per
abort marker in the log, in log order (ascending ``last_offset``, the marker's offset).

Kafka keeps one ``.txnindex`` file per segment; Flux keeps one file per partition log,
``aborted-transactions.index``, next to the segments, with Kafka's entry layout (34 bytes:
version int16 = 0, producer id int64, first offset int64, last offset int64, last stable
offset int64). The log owns it and keeps it in step with the segments: a truncation of the log
truncates it, and entries wholly below the log start are dropped when the log start moves
(retention, DeleteRecords). Aborts are rare, so every entry is written and fsynced when it is
added; a torn entry at the end of the file (a crash mid-write) is dropped when it is read.

Recovery: the entries come from the producer state's view of transactions (``storage.
producer_state``): the broker replays the log from its producer-state snapshot point, and
that replay re-adds every abort from that point on (``append`` of an entry the index already
holds is a no-op; the broker first truncates the index to the snapshot point, so a file that
went further than the snapshot, or lost its tail, ends up exactly as the log says). A missing
file (``found`` False: lost, or a log written before transactions) is rebuilt from the whole
log and then kept, even empty, so that this happens once.

``last_stable_offset`` of an entry is the partition's first unstable offset right after the
abort: no later abort can start below it, so a lookup stops at the first entry whose
``last_stable_offset`` reaches the fetch's upper bound (as Kafka's ``collectAbortedTxns``).

Not thread-safe: one owner (the log's).
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

from flux.storage.errors import StorageError

__all__ = ["INDEX_FILE", "AbortedTxn", "AbortedTxnIndex"]

logger = logging.getLogger("flux.storage")

INDEX_FILE = "aborted-transactions.index"
_ENTRY = struct.Struct(">hqqqq")
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: its producer, its first offset in this partition, the offset
    of its abort marker, and the partition's first unstable offset after the abort."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    @classmethod
    def ended(
        cls, producer_id: int, first_offset: int, last_offset: int, first_unstable: int | None
    ) -> AbortedTxn:
        """The entry of an abort marked at ``last_offset``; ``first_unstable``: the first
        offset of the oldest transaction still open after it (None: none is)."""
        stable = last_offset + 1 if first_unstable is None else first_unstable
        return cls(producer_id, first_offset, last_offset, stable)


class AbortedTxnIndex:
    """The aborted transactions of one log, ascending by ``last_offset``; on disk when it has
    a ``path`` (``open``), in memory otherwise (memory topics, tests)."""

    def __init__(self, path: Path | None = None, entries: list[AbortedTxn] | None = None) -> None:
        self._path = path
        self._entries: list[AbortedTxn] = list(entries or [])
        self._last_offsets = [entry.last_offset for entry in self._entries]
        self._fd: int | None = None
        #: False when ``open`` found no file: the broker then rebuilds the index from the
        #: whole log (a lost file, or a log older than transactions) and ``persist``s it.
        self.found = path is None

    @classmethod
    def open(cls, path: Path) -> AbortedTxnIndex:
        """Load the index at ``path`` (missing: empty). A torn tail, an entry of an unknown
        version or an entry out of order ends the index there (WARNING); the broker's replay
        from its producer-state snapshot re-adds what was lost."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls(path)  # found stays False
        entries: list[AbortedTxn] = []
        whole = len(data) - len(data) % _ENTRY.size
        usable = whole
        for position in range(0, whole, _ENTRY.size):
            version, producer_id, first, last, stable = _ENTRY.unpack_from(data, position)
            entry = AbortedTxn(producer_id, first, last, stable)
            in_order = not entries or entries[-1].last_offset < last
            if version != _VERSION or not _valid(entry) or not in_order:
                logger.warning("%s: unreadable entry at byte %d: index cut there", path, position)
                usable = position
                break
            entries.append(entry)
        if usable == whole < len(data):
            logger.warning("%s: dropping a torn entry at the end", path)
        index = cls(path, entries)
        index.found = True
        if usable != len(data):
            index._rewrite()
        return index

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def append(self, entry: AbortedTxn) -> None:
        """Add the abort marked at ``entry.last_offset``, which must lie after every entry
        held; an entry equal to the last one held is ignored (a replay met it again)."""
        if not _valid(entry):
            raise StorageError(f"invalid aborted transaction {entry}")
        if self._entries:
            last = self._entries[-1]
            if entry == last:
                return
            if entry.last_offset <= last.last_offset:
                raise StorageError(
                    f"aborted transaction at {entry.last_offset} does not follow the one at "
                    f"{last.last_offset}"
                )
        self._entries.append(entry)
        self._last_offsets.append(entry.last_offset)
        if self._path is not None:
            if self._fd is None:
                self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(self._fd, _pack(entry))
            os.fsync(self._fd)

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions that overlap ``[fetch_offset, upper_bound)``: marker at or
        after ``fetch_offset``, first offset below ``upper_bound``."""
        found = []
        for entry in self._entries[bisect_left(self._last_offsets, fetch_offset) :]:
            if entry.first_offset < upper_bound:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound:
                break
        return found

    def truncate_to(self, offset: int) -> None:
        """The log now ends at ``offset``: forget the aborts marked at or after it."""
        keep = bisect_left(self._last_offsets, offset)
        if keep < len(self._entries):
            del self._entries[keep:]
            del self._last_offsets[keep:]
            self._rewrite()

    def drop_before(self, offset: int) -> None:
        """The log now starts at ``offset``: forget the aborts marked below it."""
        drop = bisect_left(self._last_offsets, offset)
        if drop:
            del self._entries[:drop]
            del self._last_offsets[:drop]
            self._rewrite()

    def persist(self) -> None:
        """Write the file now, even empty (so the next ``open`` knows nothing was lost)."""
        self._rewrite()
        self.found = True

    def remove_markers(self, offsets: set[int]) -> None:
        """Forget the aborts whose markers (at ``offsets``) the log cleaner removed, with all
        of their records."""
        kept = [entry for entry in self._entries if entry.last_offset not in offsets]
        if len(kept) != len(self._entries):
            self._entries = kept
            self._last_offsets = [entry.last_offset for entry in kept]
            self._rewrite()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _rewrite(self) -> None:
        """Replace the file with the entries held (write, fsync, rename)."""
        if self._path is None:
            return
        self.close()
        temporary = self._path.with_name(self._path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"".join(_pack(entry) for entry in self._entries))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self._path)


def _pack(entry: AbortedTxn) -> bytes:
    return _ENTRY.pack(
        _VERSION,
        entry.producer_id,
        entry.first_offset,
        entry.last_offset,
        entry.last_stable_offset,
    )


def _valid(entry: AbortedTxn) -> bool:
    return 0 <= entry.producer_id and 0 <= entry.first_offset <= entry.last_offset
