"""Message-id deduplication: producer-chosen ids remembered per partition for a time window.

A record carries its id in the ``flux-msg-id`` header (any Kafka client) or gets it from the
HTTP API's ``id`` field, which the broker writes as that same header. The partition leader asks
``MessageIdIndex.lookup`` before appending: an id seen within ``dedup.window.ms`` is answered
with the offset it was first stored at and not appended again.

The index is state derived from the log, like the producer state: followers feed it the batches
they replicate (``observe_batches``), truncation forgets the ids of the truncated tail, and a
replica that opens its log rebuilds it from the batches within the window. So a new leader after
a failover already knows every id its predecessor acknowledged.

Invariant: every remembered offset is below ``covered_end``, the log offset up to which the
index has seen the log. Entries expire ``window_ms`` after they were stored (record timestamp,
or the broker clock when replayed). ``MAX_IDS_PER_PARTITION`` bounds the memory: the oldest ids
are forgotten first.

Thread-safety: none; one owner (the partition's event loop).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence

from flux.protocol.errors import CorruptRecordError
from flux.protocol.records import BatchHeader, Compression, decode_record_fields, iter_batches

__all__ = [
    "MAX_ID_BYTES",
    "MAX_IDS_PER_PARTITION",
    "MESSAGE_ID_HEADER",
    "MessageIdIndex",
    "may_carry_ids",
    "message_id_of",
    "message_ids_in",
]

MESSAGE_ID_HEADER = "flux-msg-id"
_HEADER_BYTES = MESSAGE_ID_HEADER.encode()
MAX_ID_BYTES = 256
MAX_IDS_PER_PARTITION = 1_000_000


def _wall_ms() -> int:
    return int(time.time() * 1000)


def may_carry_ids(records: bytes | memoryview, headers: Iterable[BatchHeader]) -> bool:
    """Whether any of these batches may hold a ``flux-msg-id`` header: False (so nothing needs
    decoding) when none is compressed and the header's name is nowhere in their bytes, the
    common case of Kafka clients, which costs one substring search per append."""
    if any(header.compression is not Compression.NONE for header in headers):
        return True
    return _HEADER_BYTES in (records if isinstance(records, bytes) else bytes(records))


def message_ids_in(batch: bytes | memoryview, header: BatchHeader) -> list[tuple[int, str]]:
    """``(offset delta, id)`` of every record of one batch that has a ``flux-msg-id`` header.

    Uncompressed batches without the header's name anywhere in their bytes are skipped without
    decoding (the common case costs one substring search). Ids longer than ``MAX_ID_BYTES`` are
    ignored. Raises ``CorruptRecordError`` for a malformed batch."""
    if header.is_control:
        return []
    raw = bytes(batch)
    if header.compression is Compression.NONE and _HEADER_BYTES not in raw:
        return []
    found = []
    base = header.base_offset
    # Plain tuples, not ``Record`` objects: every replica runs this for every batch with ids.
    for offset, _, _, _, headers in decode_record_fields(raw, verify_crc=False):
        message_id = message_id_of(headers)
        if message_id is not None:
            found.append((offset - base, message_id))
    return found


def message_id_of(headers: Iterable[tuple[str, bytes | None]]) -> str | None:
    """A record's id: its first ``flux-msg-id`` header with a value of 1 to ``MAX_ID_BYTES``
    bytes (None: it has none)."""
    for key, value in headers:
        if key == MESSAGE_ID_HEADER and value and len(value) <= MAX_ID_BYTES:
            return value.decode("utf-8", "replace")
    return None


class MessageIdIndex:
    """Ids of one partition's records within the dedup window, with their offsets."""

    def __init__(
        self,
        window_ms: int,
        *,
        covered_end: int = 0,
        clock_ms: Callable[[], int] = _wall_ms,
        max_ids: int = MAX_IDS_PER_PARTITION,
    ) -> None:
        self.window_ms = window_ms
        self.covered_end = covered_end
        self._clock_ms = clock_ms
        self._max_ids = max_ids
        # id -> (offset, stored at ms); insertion order is storage order (oldest first).
        self._ids: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def enabled(self) -> bool:
        return self.window_ms > 0

    def lookup(self, message_id: str) -> int | None:
        """The offset ``message_id`` was stored at, if within the window."""
        self.expire()
        entry = self._ids.get(message_id)
        return None if entry is None else entry[0]

    def remember(self, message_id: str, offset: int, stored_ms: int | None = None) -> None:
        if not self.enabled or message_id in self._ids:
            return
        self._ids[message_id] = (offset, self._clock_ms() if stored_ms is None else stored_ms)
        while len(self._ids) > self._max_ids:
            self._ids.popitem(last=False)

    def expire(self) -> None:
        cutoff = self._clock_ms() - self.window_ms
        while self._ids:
            _, (_, stored_ms) = next(iter(self._ids.items()))
            if stored_ms >= cutoff:
                break
            self._ids.popitem(last=False)

    def observe_batches(
        self,
        records: bytes | memoryview,
        *,
        base_offset: int | None = None,
        ids: list[list[tuple[int, str]]] | None = None,
        batches: Sequence[tuple[BatchHeader, bytes | memoryview]] | None = None,
    ) -> None:
        """Remember the ids of appended batches. ``base_offset``: where the log placed the
        first batch (a leader's append); None keeps the batches' own offsets (replication).
        ``ids``: ``message_ids_in`` of each batch, when the caller already decoded them.
        ``batches``: ``iter_batches(records)`` as a list, when the caller already parsed it."""
        offset = base_offset
        end = self.covered_end
        if batches is None:
            batches = list(iter_batches(records, allow_partial_tail=False))
        for position, (header, raw) in enumerate(batches):
            base = header.base_offset if offset is None else offset
            if self.enabled:
                found = message_ids_in(raw, header) if ids is None else ids[position]
                for delta, message_id in found:
                    self.remember(message_id, base + delta)
            end = base + header.last_offset_delta + 1
            if offset is not None:
                offset = end
        self.covered_end = max(self.covered_end, end)

    def rebuild(self, batches: Iterable[tuple[BatchHeader, bytes | memoryview]], end: int) -> int:
        """Replay stored batches (oldest first) up to ``end``; returns the ids found. Corrupt
        batches are skipped: the log's own recovery deals with them."""
        found = 0
        now = self._clock_ms()
        for header, raw in batches:
            if header.next_offset <= self.covered_end or not self.enabled:
                continue
            # Replayed ids expire by their record time, so a window survives a failover whole.
            stored_ms = min(header.max_timestamp, now) if header.max_timestamp > 0 else now
            try:
                ids = message_ids_in(raw, header)
            except CorruptRecordError:
                continue
            for delta, message_id in ids:
                self.remember(message_id, header.base_offset + delta, stored_ms)
                found += 1
        self.covered_end = max(self.covered_end, end)
        self.expire()
        return found

    def truncate_to(self, end: int) -> None:
        """The log lost everything from ``end``: forget the ids stored there."""
        if end >= self.covered_end:
            return
        for message_id in [i for i, (offset, _) in self._ids.items() if offset >= end]:
            del self._ids[message_id]
        self.covered_end = end

    def restart_at(self, offset: int) -> None:
        self._ids.clear()
        self.covered_end = offset

    def items(self) -> Iterator[tuple[str, int]]:
        return ((message_id, offset) for message_id, (offset, _) in self._ids.items())
