"""The binary body of ``POST /replication/fetch`` responses (pure, no I/O).

A follower's request is small JSON; the leader's answer carries raw batch bytes, so it is a
length-prefixed binary document:

    response   := version:u8  count:u32  partition*count
    partition  := size:u32 (bytes after this field)  topic_len:u16 topic:utf8  partition:i32
                  error_code:i16  high_watermark:i64  log_start_offset:i64  leader_epoch:i32
                  diverging_epoch:i32  diverging_end_offset:i64  records_len:u32  records

``diverging_epoch = -1`` means "no divergence". All integers are big-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "FORMAT_VERSION",
    "PartitionData",
    "ReplicationWireError",
    "decode_fetch_response",
    "encode_fetch_response",
]

FORMAT_VERSION = 1
_HEADER = struct.Struct(">BI")
_SIZE = struct.Struct(">I")
_TOPIC_LENGTH = struct.Struct(">H")
_FIXED = struct.Struct(">ihqqiiqI")
MAX_PARTITIONS = 100_000


class ReplicationWireError(ValueError):
    """A replication response that cannot be decoded."""


@dataclass(frozen=True, slots=True)
class PartitionData:
    topic: str
    partition: int
    error_code: int
    high_watermark: int = -1
    log_start_offset: int = -1
    leader_epoch: int = -1
    diverging_epoch: int = -1
    diverging_end_offset: int = -1
    records: bytes | memoryview = b""


def encode_fetch_response(partitions: list[PartitionData]) -> list[bytes | memoryview]:
    """The response as a list of chunks (records are not copied into one buffer)."""
    chunks: list[bytes | memoryview] = [_HEADER.pack(FORMAT_VERSION, len(partitions))]
    for item in partitions:
        topic = item.topic.encode()
        fixed = _FIXED.pack(
            item.partition,
            item.error_code,
            item.high_watermark,
            item.log_start_offset,
            item.leader_epoch,
            item.diverging_epoch,
            item.diverging_end_offset,
            len(item.records),
        )
        size = _TOPIC_LENGTH.size + len(topic) + len(fixed) + len(item.records)
        chunks.append(_SIZE.pack(size) + _TOPIC_LENGTH.pack(len(topic)) + topic + fixed)
        if item.records:
            chunks.append(item.records)
    return chunks


def decode_fetch_response(body: bytes) -> list[PartitionData]:
    view = memoryview(body)
    try:
        version, count = _HEADER.unpack_from(view, 0)
    except struct.error:
        raise ReplicationWireError("response shorter than its header") from None
    if version != FORMAT_VERSION:
        raise ReplicationWireError(f"unknown replication format version {version}")
    if count > MAX_PARTITIONS:
        raise ReplicationWireError(f"{count} partitions exceed the limit of {MAX_PARTITIONS}")
    position = _HEADER.size
    partitions = []
    for _ in range(count):
        try:
            (size,) = _SIZE.unpack_from(view, position)
            position += _SIZE.size
            end = position + size
            if end > len(view):
                raise ReplicationWireError("partition runs past the end of the response")
            (topic_length,) = _TOPIC_LENGTH.unpack_from(view, position)
            position += _TOPIC_LENGTH.size
            topic = bytes(view[position : position + topic_length]).decode()
            position += topic_length
            fields = _FIXED.unpack_from(view, position)
            position += _FIXED.size
        except (struct.error, UnicodeDecodeError) as error:
            raise ReplicationWireError(f"malformed partition entry: {error}") from None
        records_length = fields[-1]
        if position + records_length != end:
            raise ReplicationWireError("records length does not match the partition size")
        partitions.append(PartitionData(topic, *fields[:-1], records=bytes(view[position:end])))
        position = end
    if position != len(view):
        raise ReplicationWireError("trailing bytes after the last partition")
    return partitions
