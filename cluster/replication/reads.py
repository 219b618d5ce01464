"""Reading a replica's committed records, shared by the front doors that answer a read from the
local log rather than through the Kafka fetch path: the REST API (``GET .../messages``) and the
V1 commands (``CONSUME``, ``REPLICA_FETCH``, ``BROKER_FETCH``).

Synchronous and lock-free: call it from the event loop that owns the partition, with no await
between reading the high watermark and reading the records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flux.protocol.records import Record, decode_records, iter_batches
from flux.storage import OffsetOutOfRangeError

if TYPE_CHECKING:
    from .partition import Partition

__all__ = ["committed_records"]


def committed_records(
    partition: Partition, offset: int, limit: int, *, upto: int, read_max_bytes: int
) -> tuple[list[Record], int]:
    """Up to ``limit`` data records of ``partition`` from ``offset`` and below ``upto`` (the high
    watermark the caller read), with the offset a next read starts from.

    Control batches (transaction markers) are skipped. The caller checks first that ``offset``
    lies in ``log_start_offset..upto`` and answers its own error when not. Each log read asks
    for at most ``read_max_bytes`` (the first batch is returned whole regardless). Reading ends
    early when the log no longer holds the position (``OffsetOutOfRangeError``: retention or a
    truncation moved it) or a read makes no progress. A storage failure (``OSError``) and an
    unreadable batch (``CorruptRecordError``) propagate for the caller to map.
    """
    records: list[Record] = []
    position = offset
    while position < upto and len(records) < limit:
        try:
            data = partition.log.read(position, read_max_bytes, max_offset=upto)
        except OffsetOutOfRangeError:
            break
        before = position
        for header, raw in iter_batches(data):
            if header.is_control:
                position = max(position, header.next_offset)
                continue
            for record in decode_records(bytes(raw), verify_crc=False):
                if record.offset < position or record.offset >= upto:
                    continue
                if len(records) >= limit:
                    break
                records.append(record)
                position = record.offset + 1
            if len(records) >= limit:
                break
            position = max(position, min(header.next_offset, upto))
        if position == before:
            break
    return records, position
