"""Minimal reader of the record batch v2 header, and the value types of the log API.

``flux.storage`` imports nothing else of Flux, so it carries its own view of
the 61-byte batch header (big-endian)::

    @0  baseOffset int64        @8  batchLength int32 (= size - 12)
    @12 partitionLeaderEpoch    @16 magic int8 (2)       @17 crc uint32 (CRC32C of @21..end)
    @21 attributes int16        @23 lastOffsetDelta int32
    @27 baseTimestamp int64     @35 maxTimestamp int64
    @43 producerId int64        @51 producerEpoch int16  @53 baseSequence int32
    @57 recordsCount int32      @61 records

Records are never parsed: storage does zero per-record work.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c
from flux.storage.errors import CorruptBatchError, RecordBatchTooLargeError
from flux.storage.limits import MAX_BATCHES_PER_APPEND

__all__ = ["AppendResult", "BatchInfo", "HEADER_BYTES", "parse_batches", "ParsedBatch"]

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = 61
assert HEADER.size == HEADER_BYTES
LOG_OVERHEAD = 12  # baseOffset + batchLength precede what batchLength counts
MIN_BATCH_LENGTH = HEADER_BYTES - LOG_OVERHEAD
CRC_START = 21
MAGIC_V2 = 2

BASE_OFFSET = struct.Struct(">q")  # @0
LEADER_EPOCH = struct.Struct(">i")  # @12
LEADER_EPOCH_AT = 12
CRC = struct.Struct(">I")  # @17
CRC_AT = 17
ATTRIBUTES = struct.Struct(">h")  # @21
ATTRIBUTES_AT = 21
MAX_TIMESTAMP = struct.Struct(">q")  # @35
MAX_TIMESTAMP_AT = 35

COMPRESSION_MASK = 0x07
MAX_COMPRESSION_CODEC = 4  # none, gzip, snappy, lz4, zstd
TIMESTAMP_TYPE_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20


class Header(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int


class ParsedBatch(NamedTuple):
    """Where one validated batch lies inside an append's bytes."""

    position: int
    size: int
    header: Header


@dataclass(frozen=True)
class AppendResult:
    """What one ``append`` call stored."""

    base_offset: int
    last_offset: int
    batch_count: int
    record_count: int
    max_timestamp: int
    log_append_time_ms: int  # -1 unless the log stamps LogAppendTime


@dataclass(frozen=True)
class BatchInfo:
    """The header of one stored batch and where it lies in its segment."""

    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    size: int
    position: int

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_LOG_APPEND)

    @classmethod
    def from_header(cls, header: Header | tuple[int, ...], position: int) -> BatchInfo:
        h = Header(*header)
        return cls(
            base_offset=h.base_offset,
            last_offset=h.base_offset + h.last_offset_delta,
            partition_leader_epoch=h.partition_leader_epoch,
            attributes=h.attributes,
            base_timestamp=h.base_timestamp,
            max_timestamp=h.max_timestamp,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence,
            record_count=h.records_count,
            size=h.batch_length + LOG_OVERHEAD,
            position=position,
        )


def header_problem(header: Header, available: int) -> str | None:
    """Why this header cannot start a valid batch (``available`` bytes from its start), or None."""
    if header.batch_length < MIN_BATCH_LENGTH:
        return f"batchLength {header.batch_length} is below the minimum {MIN_BATCH_LENGTH}"
    size = header.batch_length + LOG_OVERHEAD
    if size > available:
        return f"batchLength {header.batch_length} needs {size} bytes but only {available} remain"
    if header.magic != MAGIC_V2:
        return f"magic {header.magic} is not 2"
    if header.last_offset_delta < 0:
        return f"lastOffsetDelta {header.last_offset_delta} is negative"
    if header.records_count < 0:
        return f"recordsCount {header.records_count} is negative"
    if header.attributes & COMPRESSION_MASK > MAX_COMPRESSION_CODEC:
        return f"unknown compression codec {header.attributes & COMPRESSION_MASK}"
    return None


def crc_problem(view: memoryview | bytes | bytearray, position: int, header: Header) -> str | None:
    """Check the CRC32C of the (header-valid) batch at ``position``."""
    end = position + header.batch_length + LOG_OVERHEAD
    actual = crc32c(memoryview(view)[position + CRC_START : end])
    if actual != header.crc:
        return f"CRC32C mismatch: header says {header.crc:#010x}, bytes give {actual:#010x}"
    return None


def parse_batches(view: memoryview) -> list[ParsedBatch]:
    """Validate concatenated v2 batches (framing, magic, CRC32C, deltas) and locate them.

    Raises CorruptBatchError naming the batch, its byte position and the
    problem. Pure: reads ``view`` only.
    """
    total = len(view)
    if total == 0:
        raise CorruptBatchError("no record batch: the input is empty")
    batches: list[ParsedBatch] = []
    position = 0
    unpack_from = HEADER.unpack_from
    while position < total:
        index = len(batches)
        if index >= MAX_BATCHES_PER_APPEND:
            raise RecordBatchTooLargeError(
                f"more than {MAX_BATCHES_PER_APPEND} batches in one append"
            )
        remaining = total - position
        if remaining < HEADER_BYTES:
            raise CorruptBatchError(
                f"batch {index} at byte {position}: {remaining} trailing bytes are shorter "
                f"than a {HEADER_BYTES}-byte batch header"
            )
        header = Header(*unpack_from(view, position))
        problem = header_problem(header, remaining) or crc_problem(view, position, header)
        if problem is not None:
            raise CorruptBatchError(f"batch {index} at byte {position}: {problem}")
        size = header.batch_length + LOG_OVERHEAD
        batches.append(ParsedBatch(position, size, header))
        position += size
    return batches
