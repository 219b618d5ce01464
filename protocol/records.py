"""Kafka record batches, format v2 (magic 2): parse, validate, decode and build. Pure, no I/O.

A batch is a 61-byte header followed by its records (compressed as one block when the batch's
codec is not ``NONE``)::

    offset  field                 type     notes
    0       baseOffset            int64    rewritten by the leader on append
    8       batchLength           int32    bytes after this field (batch size - 12)
    12      partitionLeaderEpoch  int32    rewritten by the leader on append
    16      magic                 int8     2
    17      crc                   uint32   CRC32C of bytes 21 .. end of batch
    21      attributes            int16    bits 0-2 codec, 3 LogAppendTime, 4 transactional,
                                           5 control
    23      lastOffsetDelta       int32
    27      baseTimestamp         int64
    35      maxTimestamp          int64
    43      producerId            int64
    51      producerEpoch         int16
    53      baseSequence          int32
    57      recordsCount          int32
    61      records

A record is ``length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
keyLength varint (-1 = null), key, valueLength varint (-1 = null), value, headerCount varint``
and per header ``keyLength varint, key (UTF-8), valueLength varint (-1 = null), value``. All
varints are zigzag-encoded (protobuf style).

Because ``baseOffset`` and ``partitionLeaderEpoch`` lie before the CRC'd range, the leader can
assign offsets in place (``set_base_offset_and_epoch``) without resealing the CRC.

Every malformed input makes the readers raise ``CorruptRecordError`` and nothing else. The
readers accept ``bytes``, ``bytearray`` or a byte ``memoryview``. Nothing here keeps state, so
every function is safe to call from any thread; ``iter_batches`` hands out ``memoryview`` slices
of its input, which keep a ``bytearray`` from being resized while they live.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, NamedTuple, TypeAlias

from crc32c import crc32c
from flux.protocol.compression import (
    MAX_DECOMPRESSED_BATCH_BYTES,
    Compression,
    compress,
    decompress,
)
from flux.protocol.errors import CorruptRecordError

__all__ = [
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "Compression",
    "Header",
    "Record",
    "RecordInput",
    "RecordSpec",
    "TimestampType",
    "RecordFields",
    "VARINT_MAX_SHIFT",
    "VARLONG_MAX_SHIFT",
    "build_batch",
    "decode_record_data",
    "decode_record_fields",
    "decode_records",
    "filter_batch",
    "is_transactional_batch",
    "iter_batches",
    "read_varint",
    "record_bytes",
    "record_keys",
    "parse_batch_header",
    "reseal_crc",
    "set_base_offset_and_epoch",
    "validate_batch",
]

BATCH_HEADER_SIZE: Final = 61
MAGIC: Final = 2

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == BATCH_HEADER_SIZE
_BASE_OFFSET: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")
_UINT32: Final = struct.Struct(">I")

_LENGTH_FIELD_END: Final = 12  # batchLength counts the bytes after offset 12
_PARTITION_LEADER_EPOCH_OFFSET: Final = 12
_CRC_OFFSET: Final = 17
_ATTRIBUTES_OFFSET: Final = 21  # the CRC covers attributes .. end of batch
_MIN_BATCH_LENGTH: Final = BATCH_HEADER_SIZE - _LENGTH_FIELD_END  # 49: header, no records

_COMPRESSION_MASK: Final = 0x07
_MAX_CODEC: Final = max(Compression)  # checked per batch header: computed once
_TIMESTAMP_TYPE_MASK: Final = 0x08
_TRANSACTIONAL_MASK: Final = 0x10
_CONTROL_MASK: Final = 0x20

# Kafka reads at most 5 bytes for a varint (int32) and 10 for a varlong (int64).
VARINT_MAX_SHIFT: Final = 28
VARLONG_MAX_SHIFT: Final = 63

#: ``Compression`` by codec number (its values are 0..4).
_CODECS: Final = tuple(sorted(Compression, key=int))
assert [int(c) for c in _CODECS] == list(range(len(_CODECS)))


class TimestampType(IntEnum):
    """Whose clock set a batch's timestamps (attributes bit 3)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


Header: TypeAlias = tuple[str, bytes | None]


class BatchHeader(NamedTuple):
    """The 61-byte header of a v2 record batch, as stored on the wire.

    A named tuple, not a frozen dataclass: every replica parses several per appended batch,
    and a tuple is built about seven times faster."""

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

    @property
    def compression(self) -> Compression:
        codec = self.attributes & _COMPRESSION_MASK
        # A tuple index, not an enum call (a few per replicated batch); unknown codecs raise
        # ValueError as ``Compression(codec)`` does.
        return _CODECS[codec] if codec < len(_CODECS) else Compression(codec)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & _TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_MASK)

    @property
    def last_offset(self) -> int:
        """Offset of the last record the batch was written with."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """Offset just past this batch (``last_offset + 1``)."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        """Size of the whole batch in bytes, header included."""
        return self.batch_length + _LENGTH_FIELD_END


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record, with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class RecordSpec:
    """A record to encode with ``build_batch``.

    ``timestamp_ms`` of ``None`` means the batch's ``base_timestamp_ms``.
    """

    key: bytes | bytearray | memoryview | None
    value: bytes | bytearray | memoryview | None
    headers: Sequence[Header] = ()
    timestamp_ms: int | None = None


#: What ``build_batch`` accepts per record: a ``RecordSpec``, ``(key, value)``,
#: ``(key, value, headers)`` or ``(key, value, headers, timestamp_ms)`` (``None``: the batch's
#: ``base_timestamp_ms``).
RecordInput: TypeAlias = (
    RecordSpec
    | tuple[bytes | None, bytes | None]
    | tuple[bytes | None, bytes | None, Sequence[Header]]
    | tuple[bytes | None, bytes | None, Sequence[Header], int | None]
)

Buffer: TypeAlias = bytes | bytearray | memoryview
#: A decoded record as ``decode_record_fields`` returns it: ``Record``'s fields in order.
RecordFields: TypeAlias = tuple[int, int, bytes | None, bytes | None, tuple[Header, ...]]
_Normalized: TypeAlias = tuple[Buffer | None, Buffer | None, Sequence[Header], int | None]


# -- batch header ---------------------------------------------------------------------------


def is_transactional_batch(buf: Buffer) -> bool:
    """Whether the batch at the start of ``buf`` has the transactional attribute (one byte
    read: the cheap test before ``parse_batch_header``)."""
    return len(buf) > _ATTRIBUTES_OFFSET + 1 and bool(
        buf[_ATTRIBUTES_OFFSET + 1] & _TRANSACTIONAL_MASK
    )


def parse_batch_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Read the header of the batch starting at ``pos``.

    Raises ``CorruptRecordError`` if fewer than 61 bytes remain, the magic is not 2,
    ``batchLength`` is too small to hold the header, or the codec is unknown.
    """
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"a batch header needs {BATCH_HEADER_SIZE} bytes, {max(0, len(buf) - pos)} remain"
        )
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise CorruptRecordError(
            f"unsupported record batch magic {header.magic} (only v{MAGIC} is supported)"
        )
    if header.batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batchLength {header.batch_length} is below the minimum of {_MIN_BATCH_LENGTH}"
        )
    if header.attributes & _COMPRESSION_MASK > _MAX_CODEC:
        raise CorruptRecordError(
            f"unknown compression codec {header.attributes & _COMPRESSION_MASK}"
        )
    return header


def iter_batches(
    buf: Buffer, *, allow_partial_tail: bool = True
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Yield ``(header, batch bytes)`` for each whole batch laid end to end in ``buf``.

    Only the headers are checked here; use ``validate_batch`` for the CRC. A batch cut short
    at the end of ``buf`` (a fetch response may end with one) ends the iteration when
    ``allow_partial_tail`` is true and raises ``CorruptRecordError`` otherwise.
    """
    view = memoryview(buf)
    pos = 0
    end = len(view)
    while pos < end:
        remaining = end - pos
        if remaining < BATCH_HEADER_SIZE:
            if allow_partial_tail:
                return
            raise CorruptRecordError(
                f"{remaining} bytes at position {pos} are too few for a batch header"
            )
        header = parse_batch_header(view, pos)
        if header.size > remaining:
            if allow_partial_tail:
                return
            raise CorruptRecordError(
                f"batch at position {pos} needs {header.size} bytes, {remaining} remain"
            )
        yield header, view[pos : pos + header.size]
        pos += header.size


def validate_batch(batch: Buffer) -> BatchHeader:
    """Check that ``batch`` holds exactly one well-formed batch whose CRC32C matches.

    Returns its header; raises ``CorruptRecordError`` saying which check failed.
    """
    header = _parse_exact(batch)
    computed = crc32c(memoryview(batch)[_ATTRIBUTES_OFFSET:])
    if computed != header.crc:
        raise CorruptRecordError(
            f"record batch CRC mismatch: stored 0x{header.crc:08x}, computed 0x{computed:08x}"
        )
    return header


def _parse_exact(batch: Buffer) -> BatchHeader:
    header = parse_batch_header(batch)
    if header.size != len(batch):
        raise CorruptRecordError(
            f"batchLength says the batch is {header.size} bytes, but {len(batch)} were given"
        )
    return header


def set_base_offset_and_epoch(
    batch: bytearray | memoryview,
    pos: int = 0,
    *,
    base_offset: int,
    partition_leader_epoch: int | None = None,
) -> None:
    """Rewrite, in place, the base offset (and leader epoch) of the batch starting at ``pos``.

    Both fields lie outside the CRC'd range, so the batch stays valid without resealing.
    """
    if pos < 0 or len(batch) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError("buffer too short for a record batch header")
    _BASE_OFFSET.pack_into(batch, pos, base_offset)
    if partition_leader_epoch is not None:
        _INT32.pack_into(batch, pos + _PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def reseal_crc(buf: bytearray | memoryview, pos: int = 0) -> int:
    """Recompute and store the CRC of the batch starting at ``pos``; return the new CRC.

    Needed after changing any byte from offset 21 on (attributes, timestamps, records, ...).
    """
    header = parse_batch_header(buf, pos)
    end = pos + header.size
    if end > len(buf):
        raise CorruptRecordError(
            f"batch at position {pos} needs {header.size} bytes, {len(buf) - pos} remain"
        )
    crc = crc32c(memoryview(buf)[pos + _ATTRIBUTES_OFFSET : end])
    _UINT32.pack_into(buf, pos + _CRC_OFFSET, crc)
    return crc


# -- records --------------------------------------------------------------------------------


def decode_records(
    batch: Buffer,
    *,
    verify_crc: bool = True,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BATCH_BYTES,
) -> list[Record]:
    """Decode every record of one batch (``batch`` must hold exactly that batch).

    Offsets and timestamps are absolute; with ``LOG_APPEND_TIME`` every record's timestamp is
    the batch's ``maxTimestamp``. Records of control batches are decoded like any other; the
    caller filters them by ``BatchHeader.is_control``. The CRC is checked unless
    ``verify_crc`` is false. Raises ``CorruptRecordError`` for every kind of malformed input.
    """
    fields = decode_record_fields(
        batch, verify_crc=verify_crc, max_decompressed_bytes=max_decompressed_bytes
    )
    return [Record(*record) for record in fields]


def decode_record_fields(
    batch: Buffer,
    *,
    verify_crc: bool = True,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BATCH_BYTES,
) -> list[RecordFields]:
    """``decode_records`` as plain ``(offset, timestamp, key, value, headers)`` tuples, for
    readers that build their own record objects (a tuple costs far less than a ``Record``)."""
    header, data = record_bytes(
        batch, verify_crc=verify_crc, max_decompressed_bytes=max_decompressed_bytes
    )
    return decode_record_data(header, data)


def decode_record_data(header: BatchHeader, data: bytes) -> list[RecordFields]:
    """``decode_record_fields`` of a batch already split by ``record_bytes``."""
    if header.records_count < 0:
        raise CorruptRecordError(f"negative record count {header.records_count}")
    log_append_time = header.timestamp_type is TimestampType.LOG_APPEND_TIME
    try:
        return _decode_record_list(
            data,
            header.records_count,
            base_offset=header.base_offset,
            base_timestamp=header.base_timestamp,
            fixed_timestamp=header.max_timestamp if log_append_time else None,
        )
    except (IndexError, ValueError) as exc:  # reads past the end; bad UTF-8 in a header key
        raise CorruptRecordError(f"malformed record: {exc}") from exc


def record_bytes(
    batch: Buffer,
    *,
    verify_crc: bool = True,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BATCH_BYTES,
) -> tuple[BatchHeader, bytes]:
    """The header of one batch (``batch`` holds exactly it) and its records' bytes,
    decompressed. The CRC is checked unless ``verify_crc`` is false."""
    header = validate_batch(batch) if verify_crc else _parse_exact(batch)
    payload = memoryview(batch)[BATCH_HEADER_SIZE:]
    if header.compression is Compression.NONE:
        return header, bytes(payload)
    return header, decompress(header.compression, payload, max_output_bytes=max_decompressed_bytes)


def read_varint(buf: bytes, pos: int, max_shift: int) -> tuple[int, int]:
    """Read one zigzag varint at ``pos``; return ``(value, next position)``."""
    byte = buf[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    raw = byte & 0x7F
    shift = 7
    while True:
        pos += 1
        byte = buf[pos]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos + 1
        shift += 7
        if shift > max_shift:
            raise CorruptRecordError("varint is longer than its type allows")


def _decode_record_list(
    data: bytes,
    count: int,
    *,
    base_offset: int,
    base_timestamp: int,
    fixed_timestamp: int | None,
) -> list[RecordFields]:
    # One loop with the varint reads written out: one- and two-byte varints (nearly all
    # lengths, deltas and counts) are read inline, longer ones by ``read_varint``. This is
    # the consumer's hot loop; a function call per field would double its cost.
    read = read_varint
    varint = VARINT_MAX_SHIFT
    varlong = VARLONG_MAX_SHIFT
    end = len(data)
    pos = 0
    records: list[RecordFields] = []
    append = records.append
    for index in range(count):
        byte = data[pos]
        if byte < 0x80:
            length = (byte >> 1) ^ -(byte & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            raw = (byte & 0x7F) | (data[pos + 1] << 7)
            length = (raw >> 1) ^ -(raw & 1)
            pos += 2
        else:
            length, pos = read(data, pos, varint)
        record_end = pos + length
        if length < 0 or record_end > end:
            raise CorruptRecordError(
                f"record {index} claims {length} bytes, {end - pos} remain in the batch"
            )
        pos += 1  # attributes: unused by Kafka so far
        byte = data[pos]
        if byte < 0x80:
            timestamp_delta = (byte >> 1) ^ -(byte & 1)
            pos += 1
        else:
            timestamp_delta, pos = read(data, pos, varlong)
        byte = data[pos]
        if byte < 0x80:
            offset_delta = (byte >> 1) ^ -(byte & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            raw = (byte & 0x7F) | (data[pos + 1] << 7)
            offset_delta = (raw >> 1) ^ -(raw & 1)
            pos += 2
        else:
            offset_delta, pos = read(data, pos, varint)
        byte = data[pos]
        if byte == 1:  # zigzag -1: no key
            key = None
            pos += 1
        else:
            key, pos = _read_bytes(data, pos, record_end, "key")
        byte = data[pos]
        if byte < 0x80:
            value_length = (byte >> 1) ^ -(byte & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            raw = (byte & 0x7F) | (data[pos + 1] << 7)
            value_length = (raw >> 1) ^ -(raw & 1)
            pos += 2
        else:
            value_length, pos = read(data, pos, varint)
        if value_length >= 0:
            value_end = pos + value_length
            if value_end > record_end:
                raise CorruptRecordError(
                    f"value of {value_length} bytes runs past the end of its record"
                )
            value: bytes | None = data[pos:value_end]
            pos = value_end
        elif value_length == -1:
            value = None
        else:
            raise CorruptRecordError(f"value has a negative length {value_length}")
        if data[pos] == 0:  # no headers
            headers: tuple[Header, ...] = ()
            pos += 1
        else:
            headers, pos = _read_headers(data, pos, record_end, index)
        if pos != record_end:
            raise CorruptRecordError(
                f"record {index} declares {length} bytes but its fields end "
                f"{pos - (record_end - length)} bytes after its start"
            )
        append(
            (
                base_offset + offset_delta,
                base_timestamp + timestamp_delta if fixed_timestamp is None else fixed_timestamp,
                key,
                value,
                headers,
            )
        )
    if pos != end:
        raise CorruptRecordError(
            f"{end - pos} bytes remain after the {count} records the batch declares"
        )
    return records


def _read_headers(
    data: bytes, pos: int, record_end: int, index: int
) -> tuple[tuple[Header, ...], int]:
    header_count, pos = read_varint(data, pos, VARINT_MAX_SHIFT)
    if header_count < 0:
        raise CorruptRecordError(f"record {index} has a negative header count")
    headers: list[Header] = []
    for _ in range(header_count):
        header_key, pos = _read_bytes(data, pos, record_end, "header key")
        if header_key is None:
            raise CorruptRecordError(f"record {index} has a null header key")
        header_value, pos = _read_bytes(data, pos, record_end, "header value")
        headers.append((header_key.decode("utf-8"), header_value))
    return tuple(headers), pos


def _read_bytes(data: bytes, pos: int, limit: int, what: str) -> tuple[bytes | None, int]:
    length, pos = read_varint(data, pos, VARINT_MAX_SHIFT)
    if length < 0:
        if length == -1:
            return None, pos
        raise CorruptRecordError(f"{what} has a negative length {length}")
    end = pos + length
    if end > limit:
        raise CorruptRecordError(f"{what} of {length} bytes runs past the end of its record")
    return data[pos:end], end


# -- compaction -----------------------------------------------------------------------------


#: One record as the log cleaner sees it: (offset, key or None, is a tombstone, start and end of
#: its bytes in the batch's decompressed records).
KeyedRecord: TypeAlias = tuple[int, bytes | None, bool, int, int]


def record_keys(batch: Buffer) -> tuple[BatchHeader, bytes, list[KeyedRecord]]:
    """The header, the (decompressed) record bytes and each record's offset, key and whether
    its value is null, without decoding values or headers: what compaction needs.
    ``batch`` must hold exactly one batch; its CRC is not checked (the log checked it)."""
    header = _parse_exact(batch)
    payload = memoryview(batch)[BATCH_HEADER_SIZE:]
    data = (
        bytes(payload)
        if header.compression is Compression.NONE
        else decompress(header.compression, payload)
    )
    # The varints written out for their one-byte form (nearly every length and delta), as in
    # ``_decode_record_list``: this is the log cleaner's inner loop.
    read = read_varint
    records: list[KeyedRecord] = []
    append = records.append
    pos = 0
    end = len(data)
    base = header.base_offset
    try:
        for index in range(header.records_count):
            start = pos
            byte = data[pos]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = read(data, pos, VARINT_MAX_SHIFT)
            record_end = pos + length
            if length < 0 or record_end > end:
                raise CorruptRecordError(
                    f"record {index} claims {length} bytes, {end - pos} remain in the batch"
                )
            pos += 1  # attributes
            if data[pos] < 0x80:  # timestampDelta
                pos += 1
            else:
                _, pos = read(data, pos, VARLONG_MAX_SHIFT)
            byte = data[pos]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                offset_delta, pos = read(data, pos, VARINT_MAX_SHIFT)
            byte = data[pos]
            if byte == 1:  # zigzag -1: no key
                key = None
                pos += 1
            else:
                if byte < 0x80:
                    key_length = byte >> 1 if not byte & 1 else -1
                    pos += 1
                else:
                    key_length, pos = read(data, pos, VARINT_MAX_SHIFT)
                if key_length < 0 or pos + key_length > record_end:
                    raise CorruptRecordError(f"key of record {index} runs past its record")
                key = data[pos : pos + key_length]
                pos += key_length
            append((base + offset_delta, key, data[pos] == 1, start, record_end))
            pos = record_end
    except IndexError as exc:
        raise CorruptRecordError(f"malformed record: {exc}") from exc
    return header, data, records


def filter_batch(
    batch: Buffer, header: BatchHeader, data: bytes, kept: Sequence[KeyedRecord]
) -> bytes:
    """``batch`` holding only the ``kept`` records (from ``record_keys`` of it, in order).

    Everything else of the header stays, as Kafka's cleaner keeps it: the base offset and
    ``lastOffsetDelta`` (so the batch still spans its offsets and the log has no gap where a
    follower or consumer could land mid-batch), the producer id, epoch and base sequence (so
    idempotent producers' sequence numbers still follow), timestamps and codec. An empty
    ``kept`` gives a batch with no records. The CRC is computed anew."""
    body = b"".join(data[start:end] for _offset, _key, _tombstone, start, end in kept)
    payload = (
        body
        if header.compression is Compression.NONE or not body
        else compress(header.compression, body)
    )
    attributes = header.attributes if body else header.attributes & ~_COMPRESSION_MASK
    out = bytearray(BATCH_HEADER_SIZE)
    out += payload
    _HEADER.pack_into(
        out,
        0,
        header.base_offset,
        len(out) - _LENGTH_FIELD_END,
        header.partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(kept),
    )
    _UINT32.pack_into(out, _CRC_OFFSET, crc32c(memoryview(out)[_ATTRIBUTES_OFFSET:]))
    return bytes(out)


# -- building -------------------------------------------------------------------------------

# Zigzag varints of 0 .. 2**14 - 1 (every one- and two-byte encoding), precomputed because
# lengths, deltas and counts almost always fall in that range.
_VARINT_TABLE_SIZE: Final = 1 << 14


def _encode_unsigned_varint(raw: int) -> bytes:
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


_VARINT_TABLE: Final = tuple(_encode_unsigned_varint(raw) for raw in range(_VARINT_TABLE_SIZE))


def _varint(value: int) -> bytes:
    """Zigzag varint encoding of a signed integer."""
    raw = value << 1 if value >= 0 else ((-value) << 1) - 1
    if raw < _VARINT_TABLE_SIZE:
        return _VARINT_TABLE[raw]
    return _encode_unsigned_varint(raw)


_NULL: Final = _varint(-1)


def _normalize(record: RecordInput) -> _Normalized:
    if isinstance(record, RecordSpec):
        return record.key, record.value, record.headers, record.timestamp_ms
    if len(record) == 2:
        return record[0], record[1], (), None
    if len(record) == 3:
        return record[0], record[1], record[2], None
    if len(record) == 4:
        return record
    raise TypeError(
        "a record is a RecordSpec, (key, value), (key, value, headers) or "
        f"(key, value, headers, timestamp_ms): {record!r}"
    )


# The bytes every record starts with when its timestamp equals the batch's first one:
# attributes (0), timestampDelta (0) and offsetDelta, for the offset deltas of one- and
# two-byte varints. Most batches are made of nothing else.
_SAME_TIME_PREFIXES: Final = tuple(b"\x00\x00" + _VARINT_TABLE[raw] for raw in range(0, 1 << 14, 2))
_NO_HEADERS: Final = b"\x00"


def _encode_records(
    normalized: list[_Normalized], first_timestamp: int, default_timestamp: int
) -> bytes:
    """The records of a batch, uncompressed: a list of parts joined once (much faster than
    growing a bytearray record by record)."""
    parts: list[Buffer] = []
    extend = parts.extend
    varint = _varint
    null = _NULL
    same_time = _SAME_TIME_PREFIXES
    # Lengths are never negative: their zigzag form is the value doubled, so the table of
    # one- and two-byte varints answers every length below ``small``.
    table = _VARINT_TABLE
    small = _VARINT_TABLE_SIZE >> 1
    for offset_delta, (key, value, headers, timestamp) in enumerate(normalized):
        if timestamp is None:
            timestamp = default_timestamp
        if timestamp == first_timestamp and offset_delta < small:
            prefix = same_time[offset_delta]
        else:
            prefix = b"\x00" + varint(timestamp - first_timestamp) + varint(offset_delta)
        if key is None:
            key_length = null
            key = b""
        else:
            length = len(key)
            key_length = table[length << 1] if length < small else varint(length)
        if value is None:
            value_length = null
            value = b""
        else:
            length = len(value)
            value_length = table[length << 1] if length < small else varint(length)
        encoded_headers = _encode_headers(headers) if headers else _NO_HEADERS
        size = (
            len(prefix)
            + len(key_length)
            + len(key)
            + len(value_length)
            + len(value)
            + len(encoded_headers)
        )
        extend(
            (
                table[size << 1] if size < small else varint(size),
                prefix,
                key_length,
                key,
                value_length,
                value,
                encoded_headers,
            )
        )
    return b"".join(parts)


def _encode_headers(headers: Sequence[Header]) -> bytes:
    varint = _varint
    out = bytearray(varint(len(headers)))
    for header_key, header_value in headers:
        encoded_key = header_key.encode("utf-8")
        out += varint(len(encoded_key))
        out += encoded_key
        if header_value is None:
            out += _NULL
        else:
            out += varint(len(header_value))
            out += header_value
    return bytes(out)


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    base_timestamp_ms: int | None = None,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """Encode ``records`` as one v2 batch with consecutive offsets from ``base_offset``.

    A record without its own timestamp gets ``base_timestamp_ms``, which defaults to the
    current wall-clock time. The batch's ``baseTimestamp`` is the first record's timestamp, as
    the Java client writes it. Raises ``ValueError`` for an empty ``records``.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    if base_timestamp_ms is None:
        base_timestamp_ms = int(time.time() * 1000)
    # 4-tuples (what the SDK's producer queues) need no normalizing.
    normalized = [
        record if type(record) is tuple and len(record) == 4 else _normalize(record)
        for record in records
    ]
    timestamps = [entry[3] for entry in normalized]
    first_timestamp = base_timestamp_ms if timestamps[0] is None else timestamps[0]
    max_timestamp = max([base_timestamp_ms if t is None else t for t in timestamps])

    body = _encode_records(normalized, first_timestamp, base_timestamp_ms)

    compression = Compression(compression)
    payload = body if compression is Compression.NONE else compress(compression, body)
    attributes = int(compression)
    if is_transactional:
        attributes |= _TRANSACTIONAL_MASK
    if is_control:
        attributes |= _CONTROL_MASK

    batch = bytearray(BATCH_HEADER_SIZE)
    batch += payload
    _HEADER.pack_into(
        batch,
        0,
        base_offset,
        len(batch) - _LENGTH_FIELD_END,
        partition_leader_epoch,
        MAGIC,
        0,  # CRC, computed below over the finished bytes
        attributes,
        len(normalized) - 1,
        first_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(normalized),
    )
    _UINT32.pack_into(batch, _CRC_OFFSET, crc32c(memoryview(batch)[_ATTRIBUTES_OFFSET:]))
    return bytes(batch)
