"""Record batches (v2) straight into columns, and columns into Arrow (the read hot path).

``flux.protocol.records.decode_records`` builds one ``Record`` object per record; a Spark scan
only needs the columns, so ``decode_into`` appends each field to a list instead, which roughly
halves the Python work per row. It checks every batch's CRC32C and raises
``CorruptRecordError`` for malformed bytes, like the protocol's decoder (whose batch-level
helpers it uses), and keeps only offsets in ``[start, end)``; control batches are skipped.

Pure functions: no I/O, no shared state, safe in any thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flux.protocol.compression import Compression, decompress
from flux.protocol.errors import CorruptRecordError
from flux.protocol.records import BATCH_HEADER_SIZE, iter_batches, validate_batch
from flux.sdk.messages import AbortedTransaction, committed_batches

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Columns", "decode_into", "to_arrow"]

_LOG_APPEND_TIME = 0x08


@dataclass
class Columns:
    """Decoded records of one partition, field by field (``headers`` only when asked)."""

    offsets: list[int] = field(default_factory=list)
    timestamps_ms: list[int] = field(default_factory=list)
    timestamp_types: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[list[tuple[str, bytes | None]]] | None = None

    def __len__(self) -> int:
        return len(self.offsets)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (at most 10 bytes) at ``pos``: ``(value, next position)``."""
    raw = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint is longer than 10 bytes")


def decode_into(
    columns: Columns,
    records: bytes | memoryview | None,
    start: int,
    end: int,
    aborted: list[AbortedTransaction] | None = None,
) -> int:
    """Append the records of a Fetch answer with offsets in ``[start, end)`` to ``columns``.
    ``aborted`` (read_committed): the answer's aborted transactions, whose records are left
    out (``flux.sdk.messages.committed_batches``).

    Returns the offset to fetch next: just past the last whole batch (a batch cut short at the
    end of the answer is left for the next fetch), or ``start`` if there was none.
    """
    next_offset = start
    want_headers = columns.headers is not None
    batches = list(iter_batches(records or b""))
    for header, _ in batches:
        next_offset = max(next_offset, header.next_offset)
    kept = batches if aborted is None else committed_batches(batches, aborted)
    for header, batch in kept:
        if header.is_control or header.next_offset <= start or header.base_offset >= end:
            continue
        validate_batch(batch)
        payload = batch[BATCH_HEADER_SIZE:]
        data = (
            bytes(payload)
            if header.compression is Compression.NONE
            else decompress(header.compression, payload)
        )
        fixed_timestamp = header.max_timestamp if header.attributes & _LOG_APPEND_TIME else None
        try:
            _decode_batch(
                columns,
                data,
                header.records_count,
                base_offset=header.base_offset,
                base_timestamp=header.base_timestamp,
                fixed_timestamp=fixed_timestamp,
                start=start,
                end=end,
                want_headers=want_headers,
            )
        except (IndexError, ValueError) as error:
            raise CorruptRecordError(f"malformed record: {error}") from error
    return next_offset


def _decode_batch(
    columns: Columns,
    data: bytes,
    count: int,
    *,
    base_offset: int,
    base_timestamp: int,
    fixed_timestamp: int | None,
    start: int,
    end: int,
    want_headers: bool,
) -> None:
    """The records of one uncompressed batch body. Lengths below 64 and the common two-byte
    lengths are read inline: a function call per varint would cost more than the rest."""
    varint = _varint
    offsets = columns.offsets
    timestamps = columns.timestamps_ms
    types = columns.timestamp_types
    keys = columns.keys
    values = columns.values
    headers_column = columns.headers
    timestamp_type = 0 if fixed_timestamp is None else 1
    pos = 0
    for _ in range(count):
        length, pos = varint(data, pos)
        record_end = pos + length
        pos += 1  # attributes
        byte = data[pos]
        if byte < 0x80:
            timestamp_delta = (byte >> 1) ^ -(byte & 1)
            pos += 1
        else:
            timestamp_delta, pos = varint(data, pos)
        byte = data[pos]
        if byte < 0x80:
            offset_delta = byte >> 1
            pos += 1
        else:
            offset_delta, pos = varint(data, pos)
        offset = base_offset + offset_delta
        # key
        byte = data[pos]
        if byte == 1:  # zigzag -1: null
            key = None
            pos += 1
        else:
            if byte < 0x80:
                key_length = byte >> 1
                pos += 1
            else:
                key_length, pos = varint(data, pos)
                if key_length < 0:
                    raise CorruptRecordError(f"negative key length {key_length}")
            key = data[pos : pos + key_length]
            pos += key_length
        # value
        byte = data[pos]
        if byte == 1:
            value = None
            pos += 1
        else:
            if byte < 0x80:
                value_length = byte >> 1
                pos += 1
            else:
                value_length, pos = varint(data, pos)
                if value_length < 0:
                    raise CorruptRecordError(f"negative value length {value_length}")
            value = data[pos : pos + value_length]
            pos += value_length
        if not start <= offset < end:
            pos = record_end
            continue
        if want_headers:
            header_count, pos = varint(data, pos)
            record_headers: list[tuple[str, bytes | None]] = []
            for _ in range(header_count):
                name_length, pos = varint(data, pos)
                name = data[pos : pos + name_length].decode("utf-8")
                pos += name_length
                header_length, pos = varint(data, pos)
                if header_length < 0:
                    header_value = None
                else:
                    header_value = data[pos : pos + header_length]
                    pos += header_length
                record_headers.append((name, header_value))
            assert headers_column is not None
            headers_column.append(record_headers)
        if pos > record_end or (want_headers and pos != record_end):
            raise CorruptRecordError(f"record at offset {offset} overruns its length {length}")
        pos = record_end
        offsets.append(offset)
        timestamps.append(
            base_timestamp + timestamp_delta if fixed_timestamp is None else fixed_timestamp
        )
        types.append(timestamp_type)
        keys.append(key)
        values.append(value)
    if pos != len(data):
        raise CorruptRecordError(f"{len(data) - pos} bytes after the last record of the batch")


def to_arrow(
    columns: Columns,
    topic: str,
    partition: int,
    schema: pa.Schema,
    *,
    values: list[Any] | None = None,
) -> pa.RecordBatch:
    """``columns`` as a RecordBatch of exactly ``schema`` (Spark's Arrow form of the source
    schema: ``key, value, topic, partition, offset, timestamp, timestampType[, headers]``).
    ``values``: the decoded values (``valueFormat=avro``), Python objects of the ``value``
    field's type, in place of the binary ``columns.values``."""
    import pyarrow as pa

    rows = len(columns)
    timestamp_type = schema.field("timestamp").type
    timestamps = pa.array(columns.timestamps_ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    arrays: list[Any] = [
        pa.array(columns.keys, pa.binary()),
        (
            pa.array(columns.values, pa.binary())
            if values is None
            else pa.array(values, schema.field("value").type)
        ),
        pa.repeat(pa.scalar(topic, pa.string()), rows),
        pa.repeat(pa.scalar(partition, pa.int32()), rows),
        pa.array(columns.offsets, pa.int64()),
        timestamps.cast(timestamp_type),
        pa.array(columns.timestamp_types, pa.int32()),
    ]
    if "headers" in schema.names:
        headers_type = schema.field("headers").type
        arrays.append(
            pa.array(
                [
                    [{"key": name, "value": value} for name, value in record]
                    for record in columns.headers or []
                ],
                headers_type,
            )
        )
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
