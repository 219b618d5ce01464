"""Test helper: build valid record batch v2 bytes (uncompressed) without flux.protocol."""

from __future__ import annotations

import struct

from crc32c import crc32c

_HEADER = struct.Struct(">qiibIhiqqqhii")


def _varint(value: int) -> bytes:
    """Zigzag varint, as Kafka record fields use."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def build_record(offset_delta: int, value: bytes | None, timestamp_delta: int = 0) -> bytes:
    body = bytearray()
    body.append(0)  # attributes
    body += _varint(timestamp_delta)
    body += _varint(offset_delta)
    body += _varint(-1)  # null key
    if value is None:
        body += _varint(-1)
    else:
        body += _varint(len(value)) + value
    body += _varint(0)  # no headers
    return _varint(len(body)) + bytes(body)


def build_batch(
    record_count: int = 1,
    *,
    base_offset: int = 0,
    value_size: int = 8,
    values: list[bytes] | None = None,
    base_timestamp: int = 1_000,
    timestamp_step: int = 1,
    max_timestamp: int | None = None,
    partition_leader_epoch: int = -1,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A valid uncompressed v2 batch of ``record_count`` records."""
    if values is None:
        values = [bytes([i % 251]) * value_size for i in range(record_count)]
    record_count = len(values)
    records = b"".join(
        build_record(i, value, timestamp_delta=i * timestamp_step) for i, value in enumerate(values)
    )
    if max_timestamp is None:
        max_timestamp = base_timestamp + max(record_count - 1, 0) * timestamp_step
    size = _HEADER.size + len(records)
    header = bytearray(
        _HEADER.pack(
            base_offset,
            size - 12,
            partition_leader_epoch,
            2,
            0,
            attributes,
            max(record_count - 1, 0),
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
        )
    )
    batch = header + records
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def header(batch: bytes, position: int = 0) -> dict[str, int]:
    names = (
        "base_offset batch_length partition_leader_epoch magic crc attributes last_offset_delta "
        "base_timestamp max_timestamp producer_id producer_epoch base_sequence records_count"
    ).split()
    return dict(zip(names, _HEADER.unpack_from(batch, position), strict=True))


def split_batches(data: bytes) -> list[bytes]:
    """Cut concatenated batches apart by their length fields."""
    out = []
    position = 0
    while position < len(data):
        (length,) = struct.unpack_from(">i", data, position + 8)
        out.append(data[position : position + 12 + length])
        position += 12 + length
    return out


def crc_ok(batch: bytes) -> bool:
    return struct.unpack_from(">I", batch, 17)[0] == crc32c(batch[21:])


def with_base_offset(
    batch: bytes, base_offset: int, partition_leader_epoch: int | None = None
) -> bytes:
    """The same batch with another baseOffset (outside the CRC, so it stays valid)."""
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base_offset)
    if partition_leader_epoch is not None:
        struct.pack_into(">i", out, 12, partition_leader_epoch)
    return bytes(out)
