"""Batch-level helpers of compaction: reading a segment file's batches through a private file
descriptor, building empty batches, and serving an empty span from a position inside it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from crc32c import crc32c
from flux.storage.batch import CRC, CRC_AT, CRC_START, HEADER, HEADER_BYTES, LOG_OVERHEAD, Header
from flux.storage.errors import StorageError

__all__ = ["align_to", "empty_batch", "iter_file_batches"]

#: Bytes read from a segment file at a time by the cleaner.
READ_CHUNK_BYTES = 1 << 20
#: Attribute bits an empty span keeps from the batches it replaces: the timestamp type. (The
#: codec bits go: there is nothing to compress.)
_TIMESTAMP_TYPE = 0x08


def iter_file_batches(path: Path, size: int) -> Iterator[tuple[Header, bytes]]:
    """``(header, whole batch)`` for each batch in the first ``size`` bytes of the segment file
    at ``path``, read through a descriptor of our own (so the log's owner may close or delete
    the segment meanwhile: the open descriptor keeps the bytes readable)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        buffer = b""
        position = 0  # file position of buffer[0]
        cursor = 0  # within buffer
        while position + cursor < size:
            if len(buffer) - cursor < HEADER_BYTES:
                buffer = buffer[cursor:] + os.pread(fd, READ_CHUNK_BYTES, position + len(buffer))
                position += cursor
                cursor = 0
                if len(buffer) < HEADER_BYTES:
                    raise StorageError(f"{path}: truncated batch header at {position}")
            header = Header._make(HEADER.unpack_from(buffer, cursor))
            end = cursor + header.batch_length + LOG_OVERHEAD
            if end > len(buffer):
                buffer = buffer[cursor:] + os.pread(
                    fd, max(READ_CHUNK_BYTES, end - cursor), position + len(buffer)
                )
                position += cursor
                cursor = 0
                end = header.batch_length + LOG_OVERHEAD
                if end > len(buffer):
                    raise StorageError(f"{path}: truncated batch at {position}")
            yield header, buffer[cursor:end]
            cursor = end
    finally:
        os.close(fd)


def empty_batch(
    base_offset: int,
    last_offset: int,
    *,
    leader_epoch: int,
    timestamp_ms: int,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A v2 batch with no records spanning ``[base_offset, last_offset]``."""
    data = bytearray(HEADER_BYTES)
    HEADER.pack_into(
        data,
        0,
        base_offset,
        HEADER_BYTES - LOG_OVERHEAD,
        leader_epoch,
        2,
        0,
        attributes,
        last_offset - base_offset,
        timestamp_ms,
        timestamp_ms,
        producer_id,
        producer_epoch,
        base_sequence,
        0,
    )
    CRC.pack_into(data, CRC_AT, crc32c(memoryview(data)[CRC_START:]))
    return bytes(data)


def align_to(data: bytes, offset: int) -> bytes:
    """``data`` (whole batches, as a read returns them) starting exactly at ``offset``: if the
    first batch is an empty span that began before ``offset`` (compaction merges removed
    batches into one; a producer's kept empty batch is never merged, so never cut), it is
    replaced by the same span cut to start at ``offset``. A follower
    appends only batches that continue its log exactly, and its log end can lie inside a span
    its leader merged after the follower fetched up to there. Other data is returned as is."""
    if len(data) < HEADER_BYTES:
        return data
    header = Header._make(HEADER.unpack_from(data, 0))
    if header.base_offset >= offset or header.records_count != 0 or header.producer_id >= 0:
        return data
    last = header.base_offset + header.last_offset_delta
    if last < offset:
        return data
    trimmed = empty_batch(
        offset,
        last,
        leader_epoch=header.partition_leader_epoch,
        timestamp_ms=header.max_timestamp,
        attributes=header.attributes & _TIMESTAMP_TYPE,
    )
    return trimmed + data[header.batch_length + LOG_OVERHEAD :]
