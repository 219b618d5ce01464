"""The binary messages of a replication fetch session (pure, no I/O).

A follower holds one WebSocket per leader (``GET /replication/session``, see ``session.py``)
and sends fetch requests on it; the leader answers each with one response. Both are
length-prefixed binary documents, all integers big-endian.

A request names only what changed since the previous one on the same connection (KIP-227's
incremental fetch sessions): partitions the follower starts following or whose fetch position
moved, and partitions it stopped following (``forgotten``). The first request on a connection
carries every followed partition.

    request    := version:u8  max_wait_ms:i32  max_bytes:i32
                  count:u32  entry*count  forgotten_count:u32  key*forgotten_count
    entry      := key  topic_id_len:u8 topic_id:utf8  fetch_offset:i64
                  last_fetched_epoch:i32  leader_epoch:i32  partition_max_bytes:i32
    key        := topic_len:u16 topic:utf8  partition:i32

The response carries only partitions with something to say (records, an error, a divergence,
a new high watermark or log start):

    response   := version:u8  count:u32  partition*count
    partition  := size:u32 (bytes after this field)  topic_len:u16 topic:utf8  partition:i32
                  error_code:i16  high_watermark:i64  log_start_offset:i64  leader_epoch:i32
                  diverging_epoch:i32  diverging_end_offset:i64  records_len:u32  records

``diverging_epoch = -1`` means "no divergence". All integers are big-endian.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

__all__ = [
    "FORMAT_VERSION",
    "FetchEntry",
    "FetchRequest",
    "PartitionData",
    "ReplicationWireError",
    "decode_fetch_request",
    "decode_fetch_response",
    "encode_fetch_request",
    "encode_fetch_response",
]

FORMAT_VERSION = 1
_HEADER = struct.Struct(">BI")
_SIZE = struct.Struct(">I")
_TOPIC_LENGTH = struct.Struct(">H")
_FIXED = struct.Struct(">ihqqiiqI")
MAX_PARTITIONS = 100_000
_REQUEST_HEADER = struct.Struct(">Bii")
_COUNT = struct.Struct(">I")
_INDEX = struct.Struct(">i")
_ID_LENGTH = struct.Struct(">B")
_ENTRY = struct.Struct(">qiii")


class ReplicationWireError(ValueError):
    """A replication response that cannot be decoded."""


# Named tuples, not frozen dataclasses: one of each per partition per round of every
# session, and a tuple is built several times faster.
class PartitionData(NamedTuple):
    topic: str
    partition: int
    error_code: int
    high_watermark: int = -1
    log_start_offset: int = -1
    leader_epoch: int = -1
    diverging_epoch: int = -1
    diverging_end_offset: int = -1
    records: bytes | memoryview = b""


class FetchEntry(NamedTuple):
    """One partition of a fetch request: where the follower's log ends and what it follows."""

    topic: str
    partition: int
    topic_id: str
    fetch_offset: int
    last_fetched_epoch: int
    leader_epoch: int
    partition_max_bytes: int


class FetchRequest(NamedTuple):
    max_wait_ms: int
    max_bytes: int
    entries: list[FetchEntry]
    forgotten: list[tuple[str, int]]


def _key(topic: str, partition: int) -> bytes:
    encoded = topic.encode()
    return _TOPIC_LENGTH.pack(len(encoded)) + encoded + _INDEX.pack(partition)


def encode_fetch_request(request: FetchRequest) -> bytes:
    parts = [
        _REQUEST_HEADER.pack(FORMAT_VERSION, request.max_wait_ms, request.max_bytes),
        _COUNT.pack(len(request.entries)),
    ]
    for entry in request.entries:
        topic_id = entry.topic_id.encode()
        parts.append(_key(entry.topic, entry.partition))
        parts.append(_ID_LENGTH.pack(len(topic_id)) + topic_id)
        parts.append(
            _ENTRY.pack(
                entry.fetch_offset,
                entry.last_fetched_epoch,
                entry.leader_epoch,
                entry.partition_max_bytes,
            )
        )
    parts.append(_COUNT.pack(len(request.forgotten)))
    parts.extend(_key(topic, partition) for topic, partition in request.forgotten)
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.view = memoryview(data)
        self.position = 0

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        try:
            values = layout.unpack_from(self.view, self.position)
        except struct.error:
            raise ReplicationWireError("message ends inside a field") from None
        self.position += layout.size
        return values

    def text(self, length: int) -> str:
        end = self.position + length
        if end > len(self.view):
            raise ReplicationWireError("message ends inside a string")
        try:
            value = bytes(self.view[self.position : end]).decode()
        except UnicodeDecodeError as error:
            raise ReplicationWireError(f"malformed string: {error}") from None
        self.position = end
        return value

    def key(self) -> tuple[str, int]:
        (length,) = self.unpack(_TOPIC_LENGTH)
        topic = self.text(length)
        (partition,) = self.unpack(_INDEX)
        return topic, partition

    def count(self) -> int:
        (count,) = self.unpack(_COUNT)
        if count > MAX_PARTITIONS:
            raise ReplicationWireError(f"{count} partitions exceed the limit of {MAX_PARTITIONS}")
        return count


def decode_fetch_request(data: bytes) -> FetchRequest:
    reader = _Reader(data)
    version, max_wait_ms, max_bytes = reader.unpack(_REQUEST_HEADER)
    if version != FORMAT_VERSION:
        raise ReplicationWireError(f"unknown replication format version {version}")
    entries = []
    for _ in range(reader.count()):
        topic, partition = reader.key()
        (id_length,) = reader.unpack(_ID_LENGTH)
        topic_id = reader.text(id_length)
        fetch_offset, last_fetched_epoch, leader_epoch, partition_max_bytes = reader.unpack(_ENTRY)
        entries.append(
            FetchEntry(
                topic,
                partition,
                topic_id,
                fetch_offset,
                last_fetched_epoch,
                leader_epoch,
                partition_max_bytes,
            )
        )
    forgotten = [reader.key() for _ in range(reader.count())]
    if reader.position != len(reader.view):
        raise ReplicationWireError("trailing bytes after the request")
    return FetchRequest(max_wait_ms, max_bytes, entries, forgotten)


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
